"""Device discipline, checked statically on CPU: tensors are made where the data they meet lives.

On a GPU, a tensor made on the CPU (``torch.zeros(n)``) and then added to one from the model's forward stops the
run with "Expected all tensors to be on the same device"; on the CPU-only CI there is one device, so no test that
runs the code can see it. This test reads the source instead. In every compute module (a module of a stage
package that touches the model: it names ``HookedModel``, ``.bridge``, ``run_with_hooks``, ``run_with_cache`` or
``nn.Module``) it flags:

* a tensor factory (``torch.tensor``, ``zeros``, ``ones``, ``full``, ``arange``, ``empty``, ``randn``, ``rand``,
  ``randint``, ``eye``, ``linspace``) without a ``device=`` argument. ``device=x.device`` follows the data;
  ``device="cpu"`` says the tensor is deliberately on the host: a result buffer that device values are copied into
  with ``.cpu()``, host bookkeeping from Python lists, or an index (a CPU index works on a tensor on any device, a
  CUDA index on another device's tensor does not). ``*_like`` factories follow their argument and pass;
* a ``.cpu()`` whose value lives on in the computation: bound to a name, used in arithmetic or passed on to a
  further call. A ``.cpu()`` that writes into a result buffer (``out[i] = x.cpu()``), is returned, or fills a
  result record's field (a keyword argument, a dict entry) is the one boundary where results leave the device,
  and passes.

What it cannot catch: a host tensor that reaches device data through a variable (``buf = torch.zeros(n,
device="cpu")`` later added to a forward's output), a ``.to(model.device)`` where a split model's block or
unembedding computes elsewhere (:mod:`mathcircuits.models.forward.placement`), tensors made by other libraries, and
modules that do not touch the model (host-side statistics on results). Those need a run on an accelerator.
A runtime check on CPU was considered and not built: with one device a stray tensor is indistinguishable from a
right one, and the ``meta`` device cannot run the forwards.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from mathcircuits.stats import Uncertainty

ROOT = Path(__file__).resolve().parents[1] / "mathcircuits"
STAGES = ("data", "models", "patching", "ablation", "analysis", "circuit", "numbers", "finetune", "evaluation")
FACTORIES = {"tensor", "zeros", "ones", "full", "arange", "empty", "randn", "rand", "randint", "eye", "linspace"}
TOUCHES_MODEL = re.compile(r"HookedModel|\.bridge\b|run_with_hooks|run_with_cache|nn\.Module")

# (module, function, what) → why it may stay as it is. Keep it short: prefer an explicit ``device=``.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("models/forward/integrity.py", "probe_tokens", "torch.randint"): "a seeded CPU generator draws them; moved after",
    ("models/forward/integrity.py", "probe_pairs", "torch.randint"): "a seeded CPU generator draws them; kept as lists",
    ("patching/exact.py", "exact_scan", ".cpu()"): "one transfer of every sender's effect, then scattered",
    ("patching/checks.py", "check_exact", ".cpu()"): "the clean readout moves to the effects, which are results",
    ("circuit/edges.py", "check_edges", ".cpu()"): "the clean readout moves to the effects, which are results",
    ("numbers/neurons.py", "heuristic_neurons", ".cpu()"): "per-prompt correctness, a result, indexed by a host mask",
    ("circuit/eap.py", "alpha_effects", ".cpu()"): "one step's edge scores, a result, summed on the host",
    ("circuit/mib_run.py", "masked_gradient", ".cpu()"): "the scores and the mask's gradient, results the search "
    "ranks on the host",
}


def compute_modules() -> list[Path]:
    files = [f for stage in STAGES for f in sorted((ROOT / stage).rglob("*.py"))]
    return [f for f in files if TOUCHES_MODEL.search(f.read_text())]


def _function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node.name
    return "<module>"


def _boundary(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether ``call`` (a ``.cpu()``) hands its value to a result: a buffer, a return, a record's field."""
    node: ast.AST = call
    parent = parents[node]
    while isinstance(parent, (ast.Attribute, ast.Call)) and not (isinstance(parent, ast.Call) and node in parent.args):
        node, parent = parent, parents[parent]  # a method chain: x.cpu().contiguous()
    if isinstance(parent, ast.Assign):
        return all(isinstance(t, ast.Subscript) for t in parent.targets)
    if isinstance(parent, ast.AugAssign):  # an accumulator on the host: total[layer] += x.sum().cpu()
        return isinstance(parent.target, ast.Subscript)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute):  # a list of results
        return parent.func.attr == "append"
    return isinstance(parent, (ast.Return, ast.keyword, ast.Dict))


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    rel = path.relative_to(ROOT).as_posix()
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        f = node.func
        if f.attr in FACTORIES and isinstance(f.value, ast.Name) and f.value.id == "torch":
            if any(k.arg == "device" for k in node.keywords):
                continue
            what, problem = f"torch.{f.attr}", "without device="
        elif f.attr == "cpu" and not node.args and not _boundary(node, parents):
            what, problem = ".cpu()", "whose value goes on into the computation"
        else:
            continue
        if (rel, _function(node, parents), what) not in ALLOWED:
            out.append(f"{rel}:{node.lineno} ({_function(node, parents)}): {what} {problem}")
    return out


def test_the_check_sees_compute_modules():
    names = {f.relative_to(ROOT).as_posix() for f in compute_modules()}
    assert {"circuit/edges.py", "ablation/scorer.py", "models/forward/prefix.py", "numbers/grid.py"} <= names
    assert "numbers/spectra.py" not in names  # host-side statistics on results: not a compute module


@pytest.mark.parametrize("path", compute_modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_tensors_are_made_where_their_data_lives(path):
    found = violations(path)
    assert not found, (
        "tensors made or moved off the data's device:\n  "
        + "\n  ".join(found)
        + '\nFix: pass device= (the data\'s device, or "cpu" for a result buffer / host bookkeeping), move the '
        "result off the device where it is stored, or add a justified entry to ALLOWED."
    )


def test_the_check_flags_planted_strays(tmp_path):
    (tmp_path / "planted.py").write_text(
        "import torch\n"
        "def f(model, x):\n"
        "    base = torch.zeros(3)\n"  # no device
        "    y = x.float().cpu()\n"  # lives on as a name
        "    z = (x.cpu() + base)\n"  # used in arithmetic
        "    out = torch.zeros(3, device=x.device)\n"
        "    out[0] = x.sum().cpu()\n"  # a buffer: fine
        "    return out.cpu()\n"  # a return: fine
    )
    planted = tmp_path / "planted.py"
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = violations(planted)
    finally:
        ROOT = saved
    assert [v.split(":")[1].split(" ")[0] for v in found] == ["3", "4", "5"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the static check above runs in CI)")
@pytest.mark.parametrize("method", ["exact", "attribution"])
def test_the_stages_run_on_cuda_and_equal_the_cpu(method):
    """On a GPU: the stages that crashed with mixed devices run, and their results equal the CPU's."""
    from mathcircuits.ablation import knockout_curve
    from mathcircuits.circuit import discover_circuit
    from mathcircuits.data import GenerationConfig, generate_pairs, load_templates
    from mathcircuits.models import load_model
    from mathcircuits.patching import path_patch

    out = {}
    for device in ("cpu", "cuda"):
        model = load_model("tiny-llama", device=device)
        cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=4)
        ds = generate_pairs(model.tokenizer, load_templates(), cfg)
        scan = path_patch(model, ds, method=method, metric="logit_diff")
        ko = knockout_curve(model, ds, scan, max_k=2, n_random=1)
        screen = 4 if method == "attribution" else None  # the screen's snapshots are kept on the CPU
        boot = Uncertainty(n_boot=50)
        circuit = discover_circuit(
            model, ds, [(2, 1)], depth=1, top_k=2, uncertainty=boot, saturation_tol=None, screen=screen
        )
        out[device] = (scan.head_effects, ko.ranked_accuracy, [(e.sender, e.receiver, e.effect) for e in circuit.edges])
    (h_cpu, ko_cpu, e_cpu), (h_gpu, ko_gpu, e_gpu) = out["cpu"], out["cuda"]
    assert h_gpu.device.type == "cpu", "results leave the device at the result"
    assert torch.allclose(h_cpu, h_gpu, atol=1e-3)
    assert ko_cpu == ko_gpu
    assert [e[:2] for e in e_cpu] == [e[:2] for e in e_gpu]
    assert all(abs(a[2] - b[2]) <= 1e-3 for a, b in zip(e_cpu, e_gpu))
