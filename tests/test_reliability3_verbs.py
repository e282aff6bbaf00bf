"""Reliability, round three: the public verbs given wrong-but-plausible objects or settings out of range,
pairs of another tokenizer, counts beyond what exists, and the GPU check script's flags.

Each input is classified as in ``tests/test_reliability3_data.py`` (:func:`helpers.classify`); the test ids are the
inputs.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import mathcircuits as mc
from mathcircuits.circuit import Circuit, discover_circuit, faithfulness
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs, load_templates, score_pairs
from mathcircuits.patching import SelectionConfig, path_patch, select_key_components
from mathcircuits.stats import Uncertainty

from helpers import classify, reversed_char_tokenizer, script_module, unchecked

ROOT = Path(__file__).resolve().parents[1]

# ---- the verbs: wrong-but-plausible objects, settings out of range, another tokenizer -----------------------------


@pytest.fixture(scope="module")
def tiny():
    model = mc.load_model("tiny-llama")
    pairs = generate_pairs(
        model.tokenizer,
        load_templates(),
        GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=6),  # fmt: skip
    )
    key = select_key_components(path_patch(model, pairs), SelectionConfig(rule="topk", k=3))
    return model, pairs, key


# (id, call(model, pairs, key), exception, words)
VERBS: list[tuple[str, Callable, type, tuple[str, ...]]] = [
    ("faithfulness-given-key-heads", lambda m, p, k: faithfulness(m, p, list(k.heads)), TypeError,
     ("faithfulness: circuit must be a Circuit", "list of 3 Head")),
    ("faithfulness-given-key-components", lambda m, p, k: faithfulness(m, p, k), TypeError,
     ("circuit must be a Circuit", "a KeyComponents")),
    ("faithfulness-one-pair", lambda m, p, k: faithfulness(m, p.select([0]), discover_circuit(m, p, k, depth=0)),
     ValueError, ("faithfulness: pairs has 1 pair",)),
    ("faithfulness-n-boot-1",
     lambda m, p, k: faithfulness(m, p, discover_circuit(m, p, k, depth=0), uncertainty=Uncertainty(n_boot=1)),
     ValueError, ("faithfulness: n_boot=1", ">= 10")),
    ("faithfulness-n-random-negative",
     lambda m, p, k: faithfulness(m, p, discover_circuit(m, p, k, depth=0), n_random=-2), ValueError,
     ("faithfulness: n_random=-2",)),
    ("faithfulness-plateau-tol-negative",
     lambda m, p, k: faithfulness(m, p, discover_circuit(m, p, k, depth=0), plateau_tol=-0.1), ValueError,
     ("plateau_tol=-0.1",)),
    ("discover-threshold-negative", lambda m, p, k: discover_circuit(m, p, k, threshold=-1.0), ValueError,
     ("discover_circuit: threshold=-1.0",)),
    ("discover-n-boot-1", lambda m, p, k: discover_circuit(m, p, k, uncertainty=Uncertainty(n_boot=1)), ValueError,
     ("n_boot=1",)),
    ("discover-one-pair", lambda m, p, k: discover_circuit(m, p.select([0]), k), ValueError, ("1 pair",)),
    ("discover-misspelt-setting", lambda m, p, k: discover_circuit(m, p, k, depht=0), TypeError,
     ("discover_circuit: unknown settings ['depht']", "fields of CircuitConfig")),
    ("discover-screen-below-top-k", lambda m, p, k: discover_circuit(m, p, k, screen=1, top_k=2), ValueError,
     ("discover_circuit: circuit.screen=1 is below circuit.top_k=2",)),
    ("discover-config-as-dict", lambda m, p, k: discover_circuit(m, p, k, {"depth": 0}), TypeError,
     ("discover_circuit: config must be a CircuitConfig", "a dict")),
    ("path-patch-unknown-method", lambda m, p, k: path_patch(m, p, method="fast"), ValueError,
     ("path_patch: method='fast'",)),
    ("discover-given-rows", lambda m, p, k: discover_circuit(m, list(p.dataset), k), TypeError,
     ("discover_circuit: pairs must be prompt pairs", "list of 6 dict")),
    ("discover-given-the-tokenizer-as-model", lambda m, p, k: discover_circuit(m.tokenizer, p, k), TypeError,
     ("discover_circuit: model must be a HookedModel",)),
    ("select-given-an-empty-list", lambda m, p, k: select_key_components([]), TypeError,
     ("select_key_components: result must be a PatchingResult", "an empty list")),
    ("select-given-the-pairs", lambda m, p, k: select_key_components(p), TypeError,
     ("result must be a PatchingResult", "a PairSet")),
    ("path-patch-given-list-of-dicts", lambda m, p, k: path_patch(m, [dict(r) for r in p.dataset]), TypeError,
     ("path_patch: pairs must be prompt pairs", "list of 6 dict")),
    ("path-patch-given-a-prompt", lambda m, p, k: path_patch(m, "2 + 3 ="), TypeError,
     ("path_patch: pairs must be prompt pairs", "a str")),
    ("generate-pairs-tokenizer-none", lambda m, p, k: generate_pairs(None, load_templates()), TypeError,
     ("generate_pairs: tokenizer must be a Hugging Face tokenizer", "got None")),
    ("generate-pairs-given-the-model", lambda m, p, k: generate_pairs(m, load_templates()), TypeError,
     ("generate_pairs: tokenizer",)),
    ("generate-pairs-given-a-file-name", lambda m, p, k: generate_pairs(m.tokenizer, "arithmetic.yaml"), TypeError,
     ("generate_pairs: template_sets must be a list of TemplateSet", "a str")),
    ("generate-pairs-config-as-dict",
     lambda m, p, k: generate_pairs(m.tokenizer, load_templates(), {"operations": ["add"]}), TypeError,
     ("generate_pairs: config must be a GenerationConfig", "a dict")),
    ("score-pairs-of-another-tokenizer",
     lambda m, p, k: score_pairs(m, generate_pairs(reversed_char_tokenizer(), load_templates(),
                                                   GenerationConfig(operations=("add",), n_per_template=2))),
     ValueError, ("made with another tokenizer", "generate the pairs with this model's tokenizer")),
    ("score-pairs-token-ids-beyond-the-vocabulary",
     lambda m, p, k: score_pairs(m, PairSet(p.dataset.remove_columns("tokenizer")
                                            .map(lambda r: {"tokens": [*r["tokens"], 5000]}))),
     ValueError, ("token id 5000", "vocabulary of")),
]  # fmt: skip


@pytest.mark.parametrize("call, exc, words", [pytest.param(c, e, w, id=i) for i, c, e, w in VERBS])
def test_a_verb_given_a_plausible_wrong_input_names_the_argument(tiny, call, exc, words):
    model, pairs, key = tiny
    with unchecked(), pytest.raises(Exception) as e:  # the library's own checks, as a user without beartype meets them
        call(model, pairs, key)
    text = " ".join(str(e.value).split())
    assert isinstance(e.value, exc) and text.count("Fix:") == 1, (type(e.value), text)
    assert all(w in text for w in words), text


def test_discover_circuit_takes_key_components_as_select_key_components_returns_them(tiny):
    """The issue's first API input: key components where key heads belong is a right input, not an error."""
    model, pairs, key = tiny
    found = discover_circuit(model, pairs, key, depth=0)
    assert isinstance(found, Circuit) and len(found.nodes) >= 1


def test_pairs_carry_their_tokenizer_and_a_model_with_the_same_tokenizer_takes_them(tiny):
    model, pairs, _ = tiny
    assert len(set(pairs.dataset["tokenizer"])) == 1
    other_model = mc.load_model("tiny-gpt2")  # another model, the same character tokenizer
    assert len(score_pairs(other_model, pairs)) == len(pairs)


def test_pairs_beyond_what_exists_are_capped_with_a_note(tiny, caplog):
    model, _, _ = tiny
    cfg = GenerationConfig(
        operations=("add",), template_ids=("add_eq_1",), n_per_template=100_000, operand_range=(1, 3)
    )
    with caplog.at_level(logging.WARNING, logger="mathcircuits.data.generate"):
        pairs = generate_pairs(model.tokenizer, load_templates(), cfg)
    assert len(pairs) == 9  # 3 x 3 operand pairs exist
    assert "template add_eq_1 gave 9 of the 100000 pairs asked for" in caplog.text


# ---- the GPU check script's flags (refused before any row runs) ----------------------------------------------------

GPU_FLAGS: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("pairs-0", ["--pairs", "0"], ("--pairs 0",)),
    ("pairs-negative", ["--pairs", "-4"], ("--pairs -4",)),
    ("ref-pairs-0", ["--ref-pairs", "0"], ("--ref-pairs 0",)),
    ("max-k-0", ["--max-k", "0"], ("--max-k 0",)),
    ("scale-pairs-negative", ["--scale-pairs", "-1"], ("--scale-pairs -1",)),
    ("budget-negative", ["--budget-s", "-5"], ("--budget-s -5.0",)),
    ("budget-nan", ["--budget-s", "nan"], ("--budget-s nan",)),
    ("tokenizer-missing", ["--tokenizer", "/no/such/tokenizer"], ("--tokenizer /no/such/tokenizer",)),
    ("out-is-a-folder", ["--out", "{tmp}"], ("is a folder",)),
    ("out-in-a-missing-folder", ["--out", "{tmp}/no/such/x.json"], ("not a folder",)),
    ("device-garbage", ["--device", "gpu0"], ("--device 'gpu0'",)),
]


@pytest.mark.parametrize("flags, words", [pytest.param(f, w, id=i) for i, f, w in GPU_FLAGS])
def test_the_gpu_check_refuses_bad_flags_before_any_row(tmp_path, capsys, flags, words):
    """In this process (the script's main); the script run as a program is the next test."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in flags]
    with pytest.raises(SystemExit) as stop:
        script_module("gpu_check").main(["--dry-run", *argv])
    out = capsys.readouterr()
    written = any(tmp_path.rglob("*.json"))
    assert classify(stop.value.code, out.err + out.out, words, written) == "clear", out.err + out.out
    assert "device check on" not in out.out  # no row started


@pytest.mark.integration
def test_the_gpu_check_program_refuses_a_bad_flag_with_exit_2(tmp_path):
    argv = ["--dry-run", "--pairs", "0", "--out", str(tmp_path / "x.json")]
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), *argv],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert classify(res.returncode, res.stderr + res.stdout, ("--pairs 0",), any(tmp_path.iterdir())) == "clear"
