"""The front door: ``import mathcircuits as mc`` gives the verbs a notebook needs, lazily, and the README's
example (five lines after the import) runs exactly as written and ends in the key-head heatmap."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest

import mathcircuits as mc

ROOT = Path(__file__).resolve().parents[1]
VERBS = (
    "load_model",
    "correct_pairs",
    "fresh_pairs",
    "path_patch",
    "select_key_components",
    "knockout_curve",
    "attention_by_role",
    "discover_circuit",
    "run_pipeline",
)


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    found = [b for b in blocks if b.startswith("import mathcircuits as mc\n")]
    assert len(found) == 1, "the README has one example that starts with `import mathcircuits as mc`"
    return found[0]


def test_the_verbs_are_the_subpackages_own_functions():
    from mathcircuits import ablation, analysis, circuit, data, models, patching, pipeline

    homes = {
        "load_model": models,
        "correct_pairs": data,
        "fresh_pairs": data,
        "path_patch": patching,
        "select_key_components": patching,
        "knockout_curve": ablation,
        "attention_by_role": analysis,
        "discover_circuit": circuit,
        "run_pipeline": pipeline,
    }
    for verb in VERBS:
        assert getattr(mc, verb) is getattr(homes[verb], verb), verb
        assert verb in mc.__all__ and verb in dir(mc)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mc.nope  # noqa: B018


def test_dir_shows_the_public_names_only():
    """``dir(mc)`` is what a notebook may use: no helpers of the module itself (importlib, Any, ...)."""
    shown = dir(mc)
    assert shown == sorted(mc.__all__)
    for stray in ("Any", "TYPE_CHECKING", "importlib", "annotations", "_codec", "_VERBS"):
        assert stray not in shown, stray


def test_import_filters_the_known_dependency_noise_only():
    """The noisy warnings of transformers and tqdm are ignored after ``import mathcircuits``; others still show."""
    code = (
        "import warnings, mathcircuits\n"
        "from tqdm import TqdmWarning\n"
        "warnings.warn('`past_key_values` is deprecated and will be removed in version 5.40.0 for "
        "`LlamaForCausalLM.forward`. Use `cache` instead.', FutureWarning)\n"
        "warnings.warn('IProgress not found. Please update jupyter and ipywidgets.', TqdmWarning)\n"
        "warnings.warn('`other` is deprecated', FutureWarning)\n"
        "warnings.warn('IProgress not found', UserWarning)\n"
    )
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert "past_key_values" not in err and "TqdmWarning" not in err, err
    assert "FutureWarning: `other` is deprecated" in err and "UserWarning: IProgress not found" in err, err


@pytest.mark.parametrize(
    ("verb", "section"),
    [
        ("path_patch", "patching"),
        ("knockout_curve", "validation"),
        ("random_control", "validation"),
        ("transfer", "validation"),
        ("discover_circuit", "circuit"),
        ("faithfulness", "circuit"),
        ("helix_patch", "numbers"),
        ("heuristic_neurons", "numbers"),
    ],
)
def test_verbs_take_their_config_whole_and_repeat_no_default(verb, section):
    """A verb takes its run section whole (``config``) and repeats none of its defaults: a setting it also takes
    as a keyword defaults to None (the config's), so the config class is the one place a default is declared."""
    from mathcircuits import ablation, circuit, numbers, patching
    from mathcircuits.pipeline import RunConfig

    fn = next(getattr(m, verb) for m in (patching, ablation, circuit, numbers) if hasattr(m, verb))
    cls = RunConfig.sections()[section]
    params = inspect.signature(fn).parameters
    assert cls.__name__ in str(params["config"].annotation) and params["config"].default is None
    names = {f.name for f in dataclasses.fields(cls)}
    repeated = [p.name for p in params.values() if p.name in names and p.default not in (None, p.empty)]
    assert not repeated, f"{verb} repeats the defaults of {section}.{repeated}"


def test_hooked_model_repr_is_one_line(tiny_llama):
    text = repr(tiny_llama)
    s = tiny_llama.spec
    assert "\n" not in text and len(text) < 200, text
    for part in (s.name, f"layers={s.n_layers}", f"heads={s.n_heads}", f"kv_heads={s.n_kv_heads}", "float32", "cpu"):
        assert part in text, (part, text)


@pytest.mark.integration
def test_import_loads_no_model_library():
    """``import mathcircuits`` alone imports neither torch nor TransformerLens; a verb loads them."""
    code = (
        "import sys, mathcircuits as mc\n"
        "print(sorted(m for m in ('torch', 'transformer_lens') if m in sys.modules))\n"
        "mc.path_patch\n"
        "print(sorted(m for m in ('torch', 'transformer_lens') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "['torch', 'transformer_lens']"


def test_readme_example_is_short_and_uses_the_front_door():
    lines = [line for line in _readme_example().splitlines()[1:] if line.strip()]
    assert 1 <= len(lines) <= 6, lines
    assert all(line.split("=", 1)[-1].strip().startswith("mc.") for line in lines), lines


def test_every_saved_result_prints_briefly(tiny_llama, template_sets):
    """repr is one short line naming what matters (no tensor values); _repr_html_ a small table."""
    from mathcircuits.data import GenerationConfig, generate_pairs
    from mathcircuits.models import Head

    pairs = generate_pairs(
        tiny_llama.tokenizer, template_sets, GenerationConfig(operations=("add",), n_per_template=2)
    ).select(range(4))
    result = mc.path_patch(tiny_llama, pairs, keep_per_pair=True)
    key = mc.select_key_components(result, rule="topk", k=2)
    att = mc.attention_by_role(tiny_llama, pairs, key)
    for value in (result, key, att):
        text = repr(value)
        assert "\n" not in text and len(text) < 400 and "tensor(" not in text, text
        assert text.startswith(type(value).__name__ + "(")
        page = value._repr_html_()
        assert page.startswith("<table>") and "tensor(" not in page
    assert "pairs=4" in repr(result) and "top heads=L" in repr(result)
    assert str(Head(*key.heads[0])) in repr(key) and "rule=topk" in repr(key)


def test_every_saved_result_class_says_what_matters():
    """Each result class names its own summary (not the field-by-field default)."""
    seen = set()
    for sub in ("ablation", "analysis", "circuit", "claims", "evaluation", "finetune", "patching"):
        pkg = importlib.import_module(f"mathcircuits.{sub}")
        for name in pkg.__all__:
            obj = getattr(pkg, name)
            saved = isinstance(obj, type) and hasattr(obj, "load") and hasattr(obj, "summary_items")
            if saved and dataclasses.is_dataclass(obj):
                seen.add(obj)
                assert "summary_items" in vars(obj), f"{obj.__name__} has no summary of its own"
                assert "__repr__" not in vars(obj), f"{obj.__name__} prints its fields (dataclass repr)"
    assert len(seen) >= 17


@pytest.mark.slow
def test_readme_example_runs_exactly_and_ends_in_the_key_head_heatmap():
    code = _readme_example()
    tree = ast.parse(code)
    *body, last = tree.body
    assert isinstance(last, ast.Expr), "the example ends in an expression: the figure"
    scope: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "README.md", "exec"), scope)
    fig = eval(compile(ast.Expression(last.value), "README.md", "eval"), scope)
    assert isinstance(fig, go.Figure)
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert heat and len(heat[0].z) == scope["model"].spec.n_layers, "a layers × heads heatmap"
    key_marks = [t for t in fig.data if t.name == "key heads"]
    assert key_marks and len(key_marks[0].x) == len(scope["key"].heads) == 5
    assert scope["result"].operations == ["add"] and scope["result"].n_pairs == 16
