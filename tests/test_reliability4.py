"""Reliability, round four: the borders where files and scripts come in.

Each bad input is driven through the API, the CLI or the script, and its outcome classified as in round three
(:func:`helpers.classify`): every one must end ``clear`` (exit 2 or the API's exception, one "Fix:", naming the
input, nothing written), never a traceback, a silent acceptance or a misleading message.

* no unsafe deserialisation anywhere in the repository (a planted pickle must not run);
* graph files (EAP-IG / MIB JSON) read for content: types, numbers, the model they were written for;
* compare-models: run locks, ``--out`` outside every run folder, file-system errors that name the path;
* models offline first: a name that is nothing known is refused at once, listing what is;
* the scripts (gpu-check.sh, run_notebooks.py) refuse bad arguments before any work, in one line.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import huggingface_hub
import nbformat
import pytest
import torch

from mathcircuits import FixableError
from mathcircuits.circuit import EdgeScores, graph_edges, read_graph, write_graph
from mathcircuits.cli import main
from mathcircuits.models import ModelMismatchError, load_hf_model, load_model, resolve_source
from mathcircuits.pipeline.lock import RunLock

from helpers import classify, script_module, unchecked

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "configs" / "tiny.yaml"


# ---- no unsafe deserialisation -------------------------------------------------------------------------------

#: (what, pattern) of loads that may run code from a file: pickle and its kin, YAML's full loaders.
UNSAFE = [
    ("weights_only=False", re.compile(r"weights_only\s*=\s*False")),
    ("pickle.load / pickle.loads", re.compile(r"\bpickle\.loads?\((?!pickle\.dumps\()")),
    ("yaml.load( (use yaml.safe_load or _files.load_yaml)", re.compile(r"\byaml\.(unsafe_)?load(_all)?\(")),
    ("a full YAML loader", re.compile(r"\b(Unsafe|Full)Loader\b|Loader\s*=\s*yaml\.Loader\b")),
    ("dill", re.compile(r"^\s*(import|from)\s+dill\b|\bdill\.", re.MULTILINE)),
    ("joblib.load", re.compile(r"\bjoblib\.load\(")),
    ("allow_pickle=True", re.compile(r"allow_pickle\s*=\s*True")),
    ("marshal.load / shelve", re.compile(r"\bmarshal\.loads?\(|\bshelve\.open\(")),
    ("pickle's loaders imported by name", re.compile(r"^\s*from\s+(_?pickle|cPickle)\s+import\b", re.MULTILINE)),
    ("pandas.read_pickle", re.compile(r"\bread_pickle\(")),
]


def _python_files() -> list[Path]:
    here = Path(__file__).resolve()
    files = [p for d in ("mathcircuits", "scripts", "benchmarks", "tests") for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if p.resolve() != here]


def _torch_loads_without_weights_only(tree: ast.AST) -> list[int]:
    """Lines of ``torch.load(...)`` calls that do not pass ``weights_only=True`` (torch < 2.6 defaults to False)."""
    bad = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):  # fmt: skip
            kw = {k.arg: k.value for k in node.keywords}
            value = kw.get("weights_only")
            if not (isinstance(value, ast.Constant) and value.value is True):
                bad.append(node.lineno)
    return bad


def test_no_file_in_the_repository_deserialises_unsafely():
    """Every .py of the package, scripts, benchmarks and tests; ``pickle.loads(pickle.dumps(x))`` (a round trip of
    an object the test itself made, never bytes from a file) is the one use of pickle allowed."""
    found = []
    for path in _python_files():
        text = path.read_text()
        rel = path.relative_to(ROOT)
        for what, pattern in UNSAFE:
            for m in pattern.finditer(text):
                found.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {what}")
        found += [f"{rel}:{line}: torch.load without weights_only=True" for line in
                  _torch_loads_without_weights_only(ast.parse(text))]  # fmt: skip
    assert len(_python_files()) > 100  # the walk saw the repository
    assert not found, "\n".join(found)


def test_the_scan_finds_what_it_looks_for():
    planted = [
        "torch.load(p, weights_only=False)", "pickle.load(f)", "pickle.loads(b)", "yaml.load(text)",
        "yaml.load(t, Loader=yaml.Loader)", "import dill", "joblib.load(p)", "np.load(p, allow_pickle=True)",
        "from pickle import loads", "pd.read_pickle(p)",
    ]  # fmt: skip
    for line in planted:
        assert any(p.search(line) for _, p in UNSAFE), line
    assert _torch_loads_without_weights_only(ast.parse("torch.load(p)\ntorch.load(p, weights_only=True)\n")) == [1]
    assert not any(p.search("pickle.loads(pickle.dumps(err))") for _, p in UNSAFE)
    assert not any(p.search("yaml.safe_load(text)") for _, p in UNSAFE)


class _Planted:
    """A pickle that runs code when loaded: it touches the file named in its argument."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.touch, (Path(self.target),))


def _run_folder(folder: Path, payload: object) -> Path:
    (folder / "identify").mkdir(parents=True)
    torch.save(payload, folder / "identify" / "p.pt")
    return folder


@pytest.mark.parametrize("name", ["identify/p.pt", "identify/p.unknown"])
def test_compare_run_outputs_refuses_a_planted_pickle_without_running_it(tmp_path, name, capsys):
    mod = script_module("compare_run_outputs")
    ran = tmp_path / "ran"
    a = _run_folder(tmp_path / "a", {"head_effects": torch.ones(2)})
    b = _run_folder(tmp_path / "b", {"head_effects": torch.ones(2)})
    if name != "identify/p.pt":
        (b / "identify" / "p.pt").rename(b / name)
        (a / "identify" / "p.pt").rename(a / name)
    torch.save({"head_effects": _Planted(str(ran))}, b / name)
    code = mod.main([str(a), str(b)])
    err = capsys.readouterr().err
    assert not ran.exists(), "the planted pickle ran"
    assert classify(code, err, (str(b / name), "pickled objects", "it names"), False) == "clear", err


def test_compare_run_outputs_refuses_a_damaged_torch_file(tmp_path, capsys):
    mod = script_module("compare_run_outputs")
    a = _run_folder(tmp_path / "a", {"x": torch.ones(2)})
    b = _run_folder(tmp_path / "b", {"x": torch.ones(2)})
    (b / "identify" / "p.pt").write_bytes(b"\x80\x02garbage")
    code = mod.main([str(a), str(b)])
    err = capsys.readouterr().err
    assert classify(code, err, (str(b / "identify" / "p.pt"), "not a readable torch file"), False) == "clear", err


# ---- graph files read for content -----------------------------------------------------------------------------


def _graph(tiny_llama, tmp_path: Path, spec=None) -> tuple[Path, dict]:
    """A graph file of ``spec`` (default: the tiny model's) with two circuit edges, and its JSON."""
    spec = spec or tiny_llama.spec
    edges = graph_edges(spec, parallel=False)
    scores = EdgeScores(spec, False, edges, tuple(0.01 * i for i in range(len(edges))), "eap-ig", 1.0)
    path = write_graph(scores, tmp_path / "g.json", circuit=edges[:2])
    return path, json.loads(path.read_text())


def _set(path: str, value):
    """A change of the graph's JSON: ``value`` at the slash-separated ``path``."""

    def change(raw: dict) -> dict:
        *parents, last = path.split("/")
        node = raw
        for p in parents:
            node = node[p]
        node[last] = value
        return raw

    return change


EDGE = "input->a0.h0<q>"
# (id, change of the written file's JSON, or its text, words the message must hold)
GRAPHS: list[tuple[str, object, tuple[str, ...]]] = [
    ("in-graph-as-text", _set(f"edges/{EDGE}/in_graph", "false"), ("in_graph is 'false' (text)", "JSON boolean")),
    ("in-graph-as-number", _set(f"edges/{EDGE}/in_graph", 1), ("in_graph is 1", "JSON boolean")),
    ("node-in-graph-as-text", _set("nodes/m0/in_graph", "true"), ("node 'm0'", "not a JSON boolean")),
    ("parallel-as-text", _set("cfg/parallel_attn_mlp", "false"), ("cfg.parallel_attn_mlp", "JSON boolean")),
    ("score-nan", lambda raw: json.dumps(raw).replace('"score": 0.0,', '"score": NaN,', 1), ("score nan", "finite")),
    ("score-infinite", _set(f"edges/{EDGE}/score", float("inf")), ("score inf", "finite")),
    ("score-as-text", _set(f"edges/{EDGE}/score", "0.5"), ("score '0.5'", "finite number")),
    ("score-missing", _set(f"edges/{EDGE}", {"in_graph": True}), ("score None",)),
    ("score-as-boolean", _set(f"edges/{EDGE}/score", True), ("score True",)),
    ("cfg-as-text", _set("cfg", "n_layers=3"), ("cfg is text", "where an object belongs")),
    ("edges-as-list", _set("edges", [[EDGE, 0.5]]), ("edges is a list", "where an object belongs")),
    ("edge-as-list", _set(f"edges/{EDGE}", [0.5, True]), (f"edge '{EDGE}' is a list",)),
    ("node-as-boolean", _set("nodes/m0", True), ("node 'm0' is a boolean",)),
    ("whole-file-a-list", lambda raw: [raw], ("holds a list", "not a graph object")),
    ("nested-lists", lambda raw: "[" * 100_000 + "]" * 100_000, ("nests lists or objects too deeply",)),
    ("n-layers-as-text", _set("cfg/n_layers", "3"), ("cfg.n_layers is '3'", "positive whole number")),
    ("kv-heads-disagree", _set("cfg/n_key_value_heads", 4), ("4 key/value heads", "2 key/value heads")),
    ("head-beyond-the-model", _set("edges/input->a0.h7<q>", {"score": 0.1, "in_graph": False}),
     ("edge 'input->a0.h7<q>'", "head 7")),
    ("layer-beyond-the-model", _set("edges/m9->logits", {"score": 0.1, "in_graph": False}),
     ("edge 'm9->logits'", "layer 9")),
    ("model-record-not-an-object", _set("mathcircuits", "tiny-llama"), ("'mathcircuits' record",)),
]  # fmt: skip


@pytest.mark.parametrize("change, words", [pytest.param(c, w, id=i) for i, c, w in GRAPHS])
def test_a_bad_graph_file_is_refused_naming_the_file_and_the_value(tiny_llama, tmp_path, change, words):
    path, raw = _graph(tiny_llama, tmp_path)
    changed = change(raw)
    path.write_text(changed if isinstance(changed, str) else json.dumps(changed))
    with unchecked(), pytest.raises(Exception) as e:
        read_graph(path, tiny_llama.spec, parallel=False)
    text = " ".join(str(e.value).split())
    assert isinstance(e.value, FixableError) and text.count("Fix:") == 1, (type(e.value), text)
    assert str(path) in text and all(w in text for w in words), text


def test_a_graph_file_records_its_model_and_stays_an_eap_ig_file(tiny_llama, tmp_path):
    path, raw = _graph(tiny_llama, tmp_path)
    # EAP-IG's Graph.from_json reads cfg, nodes and edges (asserting the three are there) and nothing else
    assert set(raw) == {"cfg", "nodes", "edges", "mathcircuits"}
    assert set(raw["cfg"]) == {"n_layers", "n_heads", "parallel_attn_mlp", "d_model", "n_key_value_heads"}
    assert raw["mathcircuits"]["model"] == "tiny-llama" and len(raw["mathcircuits"]["spec_fingerprint"]) == 16
    assert all(set(v) == {"score", "in_graph"} for v in raw["edges"].values())
    back = read_graph(path, tiny_llama.spec, parallel=False)
    assert len(back.circuit) == 2
    del raw["mathcircuits"]  # EAP-IG's own file: checked by its shape alone
    path.write_text(json.dumps(raw))
    assert read_graph(path, tiny_llama.spec, parallel=False).circuit == back.circuit


@pytest.mark.parametrize("other", [{"name": "other-llama"}, {"vocab_size": 999}, {"d_mlp": 7}])
def test_a_graph_of_another_model_of_the_same_shape_is_refused_naming_both(tiny_llama, tmp_path, other):
    theirs = dataclasses.replace(tiny_llama.spec, **other)
    path, _ = _graph(tiny_llama, tmp_path, spec=theirs)
    with pytest.raises(ModelMismatchError) as e:
        read_graph(path, tiny_llama.spec, parallel=False)
    text = " ".join(str(e.value).split())
    assert f"written for model {theirs.name!r}" in text and "'tiny-llama' (LlamaForCausalLM" in text, text
    assert text.count("Fix:") == 1
    # the same model loaded from elsewhere (another source) is the same model
    same = dataclasses.replace(tiny_llama.spec, source="/somewhere/else")
    path, _ = _graph(tiny_llama, tmp_path, spec=same)
    read_graph(path, tiny_llama.spec, parallel=False)


# ---- compare-models: locks, --out outside every run, file-system errors that name the path ---------------------


@pytest.fixture(scope="module")
def data_run(tmp_path_factory) -> Path:
    """A run folder whose data stage is done (identify and later: to do)."""
    out = tmp_path_factory.mktemp("cm4") / "A"
    assert main(["run", "--config", str(TINY_YAML), "--out", str(out), "--only", "data", "--quiet"]) == 0
    return out


def _copy(run: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(run, tmp_path / name, symlinks=True))


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _make_file(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    path.write_text("not a folder\n")


def _make_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


# (id, how to damage run A (or make the --out), where --out goes, words)
COMPARE: list[tuple[str, Callable[[Path, Path], Path], tuple[str, ...]]] = [
    ("out-inside-a-third-run", lambda a, t: _copy(a, t, "C") / "sub" / "cmp",
     ("inside the run folder", "C (it holds a .run.json)", "outside every run folder")),
    ("out-is-a-file", lambda a, t: (t / "cmp.html").write_text("x") and t / "cmp.html", ("is a file, not a folder",)),
    ("stage-folder-is-a-file", lambda a, t: _make_file(a / "data") or t / "cmp",
     ("A/data is a file, where the run's folder data/ belongs",)),
    ("identity-is-a-folder", lambda a, t: _make_folder(a / ".run.json") or t / "cmp",
     ("A/.run.json is a folder, where the run's identity file belongs",)),
    ("config-is-a-folder", lambda a, t: _make_folder(a / "config.yaml") or t / "cmp",
     ("A/config.yaml is a folder, where the run's config file belongs",)),
]  # fmt: skip


@pytest.mark.parametrize("make, words", [pytest.param(m, w, id=i) for i, m, w in COMPARE])
def test_compare_models_refuses_a_bad_folder_naming_the_path(data_run, tmp_path, capsys, make, words):
    a = _copy(data_run, tmp_path, "A")
    out = make(a, tmp_path)
    before = _snapshot(a)
    existed = out.exists()
    code = main(["compare-models", str(a), str(a), "--out", str(out)])
    err = capsys.readouterr().err
    written = _snapshot(a) != before or (out.exists() and not existed)
    assert classify(code, err, words, written) == "clear", err


@pytest.mark.parametrize(
    "name, make, words",
    [
        pytest.param("data", _make_file, ("run/data is a file, where the run's folder data/ belongs",),
                     id="stage-is-a-file"),
        pytest.param(".run.json", _make_folder, ("run/.run.json is a folder, where the run's identity file belongs",),
                     id="identity-is-a-folder"),
        pytest.param("logs", _make_file, ("run/logs is a file, where the run's folder logs/ belongs",),
                     id="logs-is-a-file"),
    ],
)  # fmt: skip
def test_run_names_a_file_or_folder_in_the_wrong_place(tmp_path, capsys, name, make, words):
    out = tmp_path / "run"
    out.mkdir()
    target = out / name
    target.write_text("{}")
    make(target)
    before = _snapshot(out)
    code = main(["run", "--config", str(TINY_YAML), "--out", str(out), "--only", "data", "--quiet"])
    err = capsys.readouterr().err
    assert classify(code, err, words, _snapshot(out) != before) == "clear", err
    assert ".tmp" not in err and "File exists" not in err


def test_a_write_over_a_folder_or_under_a_file_names_that_path(tiny_llama, tmp_path):
    scores = EdgeScores(tiny_llama.spec, False, graph_edges(tiny_llama.spec, False),
                        tuple(0.0 for _ in graph_edges(tiny_llama.spec, False)), "eap-ig", 1.0)  # fmt: skip
    (tmp_path / "g.json").mkdir()
    with pytest.raises(IsADirectoryError) as e:
        write_graph(scores, tmp_path / "g.json")
    assert e.value.filename == str(tmp_path / "g.json") and os.listdir(tmp_path / "g.json") == []
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]  # no temporary file left beside it
    (tmp_path / "f").write_text("a file")
    with pytest.raises(NotADirectoryError) as e:
        write_graph(scores, tmp_path / "f" / "sub" / "g.json")
    assert e.value.filename == str(tmp_path / "f") and "a file is where a folder belongs" in str(e.value)


def test_compare_models_refuses_a_run_that_is_being_written(data_run, tmp_path, capsys):
    a = _copy(data_run, tmp_path, "A")
    holder = subprocess.Popen(  # another process holds the run's lock as `mathcircuits run` does: flock and pid
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX)\n"
         "os.write(fd, f'{os.getpid()}\\n'.encode()); print('held', flush=True); time.sleep(120)",
         str(a / ".lock")], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        code = main(["compare-models", str(a), str(a), "--out", str(tmp_path / "cmp")])
        err = capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    words = (f"run folder {a} is being written by process {holder.pid}", "wait for that run to finish")
    assert classify(code, err, words, (tmp_path / "cmp").exists()) == "clear", err


def test_compare_models_takes_and_gives_back_the_lock_of_each_run(data_run, tmp_path, capsys, monkeypatch):
    a = _copy(data_run, tmp_path, "A")
    taken: list[Path] = []
    real = RunLock.acquire

    def acquire(self):
        taken.append(self.path)
        assert self.path.parent.resolve() == a.resolve()
        return real(self)

    monkeypatch.setattr(RunLock, "acquire", acquire)
    code = main(["compare-models", str(a), str(a), "--out", str(tmp_path / "cmp")])
    err = capsys.readouterr().err
    assert code == 2 and "not a finished run" in err, err  # refused after the lock was taken, and it was let go
    assert taken == [a.resolve() / ".lock"] and not (a / ".lock").exists()


# ---- models: offline first -------------------------------------------------------------------------------------

OFFLINE = ("embedded", "gemma3-270m", "tiny-llama", "tiny-qwen2")


@pytest.mark.parametrize("name", ["smollm2", "SmolLM2-135M-Instruc", "models/x", "HuggingFaceTB/SmolLM2-135M-Nope"])
def test_a_mistyped_model_name_is_refused_at_once_with_the_list(name, monkeypatch):
    monkeypatch.delenv("MATHCIRCUITS_HUB", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a Hub that does not answer: never asked
    start = time.monotonic()
    with pytest.raises(KeyError) as e:
        load_model(name)
    assert time.monotonic() - start < 2
    text = " ".join(str(e.value).split())
    assert isinstance(e.value, FixableError) and text.count("Fix:") == 1, text
    assert f"model {name!r} is not an embedded model" in text and all(w in text for w in OFFLINE), text
    assert f"hub:{name}" in text and "MATHCIRCUITS_HUB=1" in text, text


def test_a_mistyped_model_name_in_the_cli_is_refused_at_once(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MATHCIRCUITS_HUB", raising=False)
    out = tmp_path / "run"
    start = time.monotonic()
    code = main(["run", "--config", str(TINY_YAML), "--model", "smollm2", "--out", str(out), "--quiet"])
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert classify(code, err, ("--model", "'smollm2'", *OFFLINE, "hub:smollm2"), out.exists()) == "clear", err
    assert elapsed < 10, elapsed  # the config is read and checked first (templates); no model is loaded


def test_the_hub_is_asked_only_when_asked_for(monkeypatch):
    monkeypatch.delenv("MATHCIRCUITS_HUB", raising=False)
    assert resolve_source("hub:Qwen/Qwen2.5-0.5B") == ("hub", "Qwen/Qwen2.5-0.5B")
    with pytest.raises(KeyError, match="names no Hub id"):
        resolve_source("hub: ")
    monkeypatch.setenv("MATHCIRCUITS_HUB", "1")
    assert resolve_source("Qwen/Qwen2.5-0.5B") == ("hub", "Qwen/Qwen2.5-0.5B")


def test_a_hub_id_in_the_local_cache_loads_offline(tmp_path, monkeypatch):
    """A model in the Hugging Face cache layout (models--owner--name/snapshots/<rev>/) resolves as ``cached`` and
    loads with the Hub unreachable."""
    hf, tok = load_hf_model("tiny-llama")
    repo = tmp_path / "hub" / "models--someone--tiny"
    snap = repo / "snapshots" / ("0" * 40)
    hf.save_pretrained(snap)
    tok.save_pretrained(snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("MATHCIRCUITS_HUB", raising=False)
    assert resolve_source("someone/tiny") == ("cached", "someone/tiny")
    start = time.monotonic()
    model = load_model("someone/tiny")
    assert time.monotonic() - start < 10  # no retries against the unreachable Hub (they take ~24 s)
    assert model.spec.name == "someone/tiny" and torch.equal(model.hf_model.lm_head.weight, hf.lm_head.weight)


# ---- scripts: the project's Python, arguments checked before any work, one-line errors --------------------------


def _script(args: list[str], env: dict | None = None, cwd: Path | None = None, timeout: int = 300):
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def _fake_python3(folder: Path) -> Path:
    """A ``python3`` without torch (as a bare system Python): it fails any ``-c`` code that imports torch."""
    folder.mkdir()
    fake = folder / "python3"
    fake.write_text('#!/bin/sh\ncase "$*" in *torch*) echo "No module named torch" >&2; exit 1;; esac\nexit 0\n')
    fake.chmod(0o755)
    return folder


def test_gpu_check_sh_without_the_projects_python_says_how_to_make_it(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu-check.sh", repo / "scripts")  # a checkout without .venv
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "OUT")}
    env["PATH"] = f"{_fake_python3(tmp_path / 'bin')}:{env['PATH']}"
    code, out, err = _script(["bash", str(repo / "scripts" / "gpu-check.sh"), "--dry-run"], env=env, timeout=60)
    words = (f"{repo}/.venv/bin/python does not exist", "python3 has no torch", "bash scripts/setup.sh", "PYTHON")
    assert classify(code, err, words, bool(out)) == "clear", (out, err)
    env["PYTHON"] = str(tmp_path / "no-python")
    code, out, err = _script(["bash", str(repo / "scripts" / "gpu-check.sh"), "--dry-run"], env=env, timeout=60)
    assert classify(code, err, (f"PYTHON={tmp_path / 'no-python'} is not an executable Python",), bool(out)) == "clear"


@pytest.mark.parametrize(
    "argv, words",
    [
        pytest.param(["--device", "cuda:0"], ("--device cuda:0", "no CUDA device", "available: cpu"), id="cuda-0"),
        pytest.param(["--device", "cuda:7"], ("--device cuda:7", "available: cpu"), id="cuda-7"),
        pytest.param(["--device", "mps"], ("--device mps is not on this machine", "available: cpu"), id="mps"),
    ],
)
def test_gpu_check_refuses_a_device_this_machine_lacks_before_the_first_row(tmp_path, argv, words):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the device may be there")
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    env.pop("OUT", None)
    out = tmp_path / "gpu-check.json"
    code, stdout, err = _script(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run", "--out", str(out),
                                 *argv], env=env, cwd=tmp_path)  # fmt: skip
    assert "device check on" not in stdout and not out.exists()  # no row started, no table written
    assert classify(code, err, words, out.exists()) == "clear", err
    assert len(err.strip().splitlines()) == 1, err


def _notebook(path: Path, *code: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# a test"),
                                         *(nbformat.v4.new_code_cell(c) for c in code)])  # fmt: skip
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize(
    "make, words",
    [
        pytest.param(lambda t: t / "missing.ipynb", ("missing.ipynb does not exist",), id="missing"),
        pytest.param(lambda t: t, ("is a folder", "pass .ipynb files"), id="a-folder"),
        pytest.param(lambda t: (t / "notes.txt").write_text("hi") and t / "notes.txt",
                     ("notes.txt is not a notebook",), id="not-a-notebook"),
        pytest.param(lambda t: (t / "x.ipynb").write_text("{\"cells\": 3") and t / "x.ipynb",
                     ("x.ipynb is not a readable notebook",), id="broken-json"),
        pytest.param(lambda t: _notebook(t / "fails.ipynb", "x = 1", 'raise ValueError("bad value\\nthe last line")'),
                     ("fails.ipynb: cell 2 failed: ValueError: the last line", "was not written"), id="failing-cell"),
    ],
)  # fmt: skip
def test_run_notebooks_gives_one_clear_line(tmp_path, make, words):
    path = make(tmp_path)
    before = path.read_bytes() if path.is_file() else None
    code, out, err = _script([sys.executable, str(ROOT / "scripts" / "run_notebooks.py"), str(path)], cwd=tmp_path)
    written = path.is_file() and path.read_bytes() != before
    assert classify(code, err, words, written) == "clear", err
    assert len(err.strip().splitlines()) == 1, err
