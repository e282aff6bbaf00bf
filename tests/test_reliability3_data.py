"""Reliability, round three (issue #36): settings that depend on the data, compare-models, counts, identity, verbs.

Each bad input is driven through the CLI or the API and classified as the issue's tester did: ``clear`` (exit 2 or
the API's exception, one "Fix:", no traceback, naming the setting that fixes it, nothing written), ``traceback``
(an internal error), ``misleading`` (refused, but without the words that name the right setting) or ``silent``
(accepted). Every entry of the batteries below must come out ``clear``; the test ids are the inputs, and
their number is the count the resolve note gives.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
from tokenizers import models as tokenizer_models
from transformers import PreTrainedTokenizerFast

import mathcircuits as mc
from mathcircuits.circuit import Circuit, discover_circuit, faithfulness
from mathcircuits.cli import main
from mathcircuits.data import GenerationConfig, generate_pairs, load_templates, score_pairs
from mathcircuits.models import tiny_tokenizer
from mathcircuits.patching import SelectionConfig, path_patch, select_key_components
from mathcircuits.pipeline import RunConfig, RunFolderError, check_run_folder, multi_digit_template, run_pipeline

from helpers import unchecked

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "configs" / "tiny.yaml"
TINY = yaml.safe_load(TINY_YAML.read_text())
NUMBERS_ON = {"enabled": True}


def classify(code: int | None, err: str, words: tuple[str, ...], written: bool) -> str:
    """The tester's classes: clear, traceback, misleading or silent (see the module docstring)."""
    text = " ".join(err.split())
    if "Traceback" in err or "internal error" in text:
        return "traceback"
    if code in (0, None) and not text:
        return "silent"
    clear = text.startswith("error: ") and text.count("Fix:") == 1 and all(w in text for w in words)
    return "clear" if clear and code == 2 and not written else "misleading"


# ---- configs that are well-typed but fail on the data (merged over configs/tiny.yaml; {tmp}: a scratch folder) --
# (id, sections, words the message must contain: the setting that fixes it)
CONFIGS: list[tuple[str, dict, tuple[str, ...]]] = [
    ("lr-scheduler-bogus", {"finetune": {"lr_scheduler": "bogus"}}, ("lr_scheduler", "'cosine'")),
    ("lr-scheduler-needs-arguments", {"finetune": {"lr_scheduler": "reduce_lr_on_plateau"}}, ("lr_scheduler",)),
    ("numbers-template-with-word-pools", {"numbers": {**NUMBERS_ON, "template": "add_ts_1"}}, ("numbers.template",)),
    ("numbers-template-unknown", {"numbers": {**NUMBERS_ON, "template": "add_eq_9"}}, ("numbers.template", "add_eq_1")),
    (
        "numbers-template-of-another-operation",
        {"numbers": {**NUMBERS_ON, "template": "mul_eq_1", "context_operations": ["add"]}},
        ("numbers.template", "context_operations"),
    ),
    (
        "numbers-template-not-in-template-files",
        {
            "data": {
                "template_files": ["data_templates/word_problems.yaml"],
                "template_ids": None,
                "operations": ["add"],
            },
            "numbers": NUMBERS_ON,
            "validation": {"transfer_multi_digit": False},
        },
        ("numbers.template", "not a loaded template"),
    ),  # fmt: skip
    ("numbers-grid-0-2000", {"numbers": {**NUMBERS_ON, "grid": [0, 2000]}}, ("numbers.grid", "numbers.max_prompts")),
    (
        "numbers-numbers-0-5000",
        {"numbers": {**NUMBERS_ON, "numbers": [0, 5000]}},
        ("40,408 prompts", "numbers.numbers", "numbers.max_prompts=20,000"),
    ),
    ("numbers-max-prompts-zero", {"numbers": {"max_prompts": 0}}, ("max_prompts",)),
    ("numbers-probe-folds-above-contexts", {"numbers": {"probe_folds": 9}}, ("numbers.probe_folds", "contexts")),
    ("numbers-grid-reversed", {"numbers": {"grid": [19, 0]}}, ("numbers.grid",)),
    ("numbers-numbers-too-few", {"numbers": {"numbers": [0, 5]}}, ("numbers.numbers", ">= 20")),
    ("numbers-period-one", {"numbers": {"periods": [1, 10]}}, ("numbers.periods",)),
    ("numbers-topk-fraction-above-one", {"numbers": {"topk_fractions": [1.5]}}, ("numbers.topk_fractions",)),
    ("numbers-patch-depth-zero", {"numbers": {"patch_depths": [0]}}, ("numbers.patch_depths",)),
    ("numbers-patch-depth-beyond-model", {"numbers": {**NUMBERS_ON, "patch_depths": [99]}}, ("patch_depths",)),
    ("numbers-neuron-layer-beyond-model", {"numbers": {**NUMBERS_ON, "neuron_layers": [99]}}, ("neuron_layers",)),
    ("numbers-context-operation-unknown", {"numbers": {"context_operations": ["mod"]}}, ("context_operations",)),
    ("numbers-n-boot-1", {"numbers": {"n_boot": 1}}, ("n_boot",)),
    ("numbers-contexts-1", {"numbers": {"contexts": 1}}, ("contexts",)),
    ("numbers-key-misspelt", {"numbers": {"grd": [0, 9]}}, ("grd",)),
    ("seed-changed-pool-too-small", {"data": {"seed": 1}}, ("circuit.pool_per_template", "e.g. 12", "'add_eq_1'")),
    (
        "template-files-without-add",
        {
            "data": {
                "template_files": ["data_templates/exponentiation.yaml"],
                "template_ids": None,
                "operations": ["pow"],
            },
            "validation": {"transfer_multi_digit": True},
        },
        ("validation.transfer_multi_digit",),
    ),  # fmt: skip
    ("template-files-missing", {"data": {"template_files": ["no/such.yaml"]}}, ("data.template_files",)),
    (
        "evaluation-root-missing",
        {"evaluation": {"root": "/no/such/benchmarks", "benchmarks": ["AddSub"]}},
        ("evaluation.root",),
    ),
    (
        "evaluation-root-without-the-benchmark",
        {"evaluation": {"root": "{tmp}/empty", "benchmarks": ["AddSub"]}},
        ("evaluation.benchmarks", "'AddSub'", "evaluation.root"),
    ),
    (
        "evaluation-benchmark-file-not-json",
        {"evaluation": {"root": "{tmp}/broken", "benchmarks": ["AddSub"]}},
        ("'AddSub'", "evaluation.root"),
    ),
    (
        "word-problem-root-missing",
        {"validation": {"word_problem_root": "/no/such/benchmarks", "word_problem_sets": ["SVAMP"]}},
        ("validation.word_problem_root",),
    ),
    (
        "word-problem-root-without-the-set",
        {"validation": {"word_problem_root": "{tmp}/empty", "word_problem_sets": ["SVAMP"]}},
        ("validation.word_problem_sets", "'SVAMP'"),
    ),
    (
        "compare-validation-pairs-100000",
        {"compare": {"enabled": True, "validation_pairs_per_template": 100000}},
        ("compare.validation_pairs_per_template=100000", "at most"),
    ),
    (
        "compare-test-pairs-beyond-the-facts",
        {"compare": {"enabled": True, "test_pairs_per_template": 5000}},
        ("compare.test_pairs_per_template=5000",),
    ),
    (
        "compare-train-pairs-beyond-the-facts",
        {"compare": {"enabled": True}, "finetune": {"train_pairs_per_template": 5000}},
        ("finetune.train_pairs_per_template=5000",),
    ),
    ("selection-k-100-on-12-heads", {"selection": {"rule": "topk", "k": 100}}, ("selection.k=100", "12 heads")),
    ("selection-mlp-k-above-layers", {"selection": {"mlp_k": 50}}, ("selection.mlp_k=50", "MLPs")),
    ("finetune-precise-at-K-above-heads", {"finetune": {"modes": ["precise@100"]}}, ("precise@100", "heads")),
]


def _write_config(tmp_path: Path, sections: dict) -> Path:
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in TINY.items()}
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values}
    (tmp_path / "empty").mkdir(exist_ok=True)
    (tmp_path / "broken" / "AddSub").mkdir(parents=True, exist_ok=True)
    (tmp_path / "broken" / "AddSub" / "test.json").write_text("this is not JSON")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg).replace("{tmp}", str(tmp_path)))
    return path


@pytest.mark.parametrize("sections, words", [pytest.param(s, w, id=i) for i, s, w in CONFIGS])
def test_a_setting_that_fails_on_the_data_is_refused_at_load(tmp_path, capsys, monkeypatch, sections, words):
    monkeypatch.chdir(ROOT)  # data.template_files are relative to the repository
    out = tmp_path / "run"
    code = main(["run", "--config", str(_write_config(tmp_path, sections)), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert classify(code, err, words, out.exists()) == "clear", err


def test_a_benchmark_folder_named_by_the_environment_must_exist(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MATHCIRCUITS_BENCHMARKS", str(tmp_path / "nowhere"))
    out = tmp_path / "run"
    cfg = _write_config(tmp_path, {"evaluation": {"benchmarks": ["AddSub"]}})
    code = main(["run", "--config", str(cfg), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert classify(code, err, ("$MATHCIRCUITS_BENCHMARKS",), out.exists()) == "clear", err


def test_the_numbers_estimate_counts_what_the_ranges_ask_for():
    n = RunConfig.from_dict({"numbers": {"numbers": [0, 99], "grid": [0, 19], "contexts": 8}}).numbers
    assert n.estimated_prompts() == 100 * 8 + 20 * 20 == n.DEFAULT_PROMPTS
    wide = RunConfig.from_dict({"numbers": {"grid": [0, 2000], "max_prompts": 5_000_000}}).numbers
    assert wide.estimated_prompts() == 800 + 2001**2  # allowed once the limit is raised on purpose


def test_the_two_digit_transfer_template_follows_the_loaded_templates():
    """The rule replaces the hard-coded add_eq_1: the first add template of data.template_ids, else of the files."""
    assert multi_digit_template(RunConfig.from_dict(TINY)) == "add_eq_1"
    other = {**TINY, "data": {**TINY["data"], "template_ids": ["sub_eq_1", "add_qa_2", "add_eq_1"]}}
    assert multi_digit_template(RunConfig.from_dict(other)) == "add_qa_2"
    held = {
        **TINY,
        "data": {**TINY["data"], "template_ids": ["add_qa_2", "add_eq_1"], "heldout_templates": ["add_qa_2"]},
    }
    assert multi_digit_template(RunConfig.from_dict(held)) == "add_eq_1"


# ---- compare-models under the integrity layer -------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_run(tmp_path_factory) -> Path:
    """A run folder whose data stage is done (identify and later: to do)."""
    out = tmp_path_factory.mktemp("cm") / "A"
    assert main(["run", "--config", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out), "--only", "data",
                 "--quiet"]) == 0  # fmt: skip
    return out


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _copy(run: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(run, tmp_path / name, symlinks=True))


def _compare(a: Path, b: Path, out: Path, capsys) -> tuple[int, str]:  # noqa: ANN001 (pytest fixture)
    code = main(["compare-models", str(a), str(b), "--out", str(out)])
    return code, capsys.readouterr().err


COMPARE: list[tuple[str, Callable[[Path, Path], tuple[Path, Path, Path]], tuple[str, ...]]] = [
    ("out-inside-run-a-report", lambda a, t: (a, a, a / "report"), ("inside the run folder",)),
    ("out-is-run-b", lambda a, t: (a, a, a), ("inside the run folder",)),
    ("out-deep-inside-run", lambda a, t: (a, a, a / "data" / "x" / "y"), ("inside the run folder",)),
    ("run-unfinished", lambda a, t: (a, a, t / "cmp"), ("not a finished run", "identify: todo")),
    ("run-folder-missing", lambda a, t: (t / "nope", a, t / "cmp"), ("not a run folder",)),
    ("run-is-a-file", lambda a, t: (a / "config.yaml", a, t / "cmp"), ("not a run folder",)),
]


@pytest.mark.parametrize("make, words", [pytest.param(m, w, id=i) for i, m, w in COMPARE])
def test_compare_models_refuses_and_writes_nothing(data_run, tmp_path, capsys, make, words):
    a = _copy(data_run, tmp_path, "A")
    run_a, run_b, out = make(a, tmp_path)
    before = _snapshot(a)
    code, err = _compare(run_a, run_b, out, capsys)
    written = _snapshot(a) != before or (out.exists() and not out.resolve().is_relative_to(a.resolve()))
    assert classify(code, err, words, written) == "clear", err


def test_compare_models_reads_the_model_from_the_identity_not_config_yaml(data_run, tmp_path, capsys):
    a = _copy(data_run, tmp_path, "A")
    cfg = yaml.safe_load((a / "config.yaml").read_text())
    cfg["model"]["source"] = "tiny-gpt2"  # edited after the run
    (a / "config.yaml").write_text(yaml.safe_dump(cfg))
    code, err = _compare(a, a, tmp_path / "cmp", capsys)
    words = ("config.yaml names model 'tiny-gpt2'", "made with 'tiny-llama' (.run.json)")
    assert classify(code, err, words, (tmp_path / "cmp").exists()) == "clear", err


def test_compare_models_refuses_a_folder_with_a_broken_identity(data_run, tmp_path, capsys):
    a = _copy(data_run, tmp_path, "A")
    (a / ".run.json").write_text("[]")
    code, err = _compare(a, a, tmp_path / "cmp", capsys)
    assert classify(code, err, ("does not hold a run's identity",), (tmp_path / "cmp").exists()) == "clear", err


@pytest.mark.integration  # two whole tiny runs (about two minutes)
def test_compare_models_refuses_a_run_whose_markers_were_deleted_or_outputs_changed(tmp_path, capsys):
    full = tmp_path / "full"
    assert main(["run", "--config", str(TINY_YAML), "--out", str(full), "--quiet"]) == 0
    b = tmp_path / "B"
    assert main(["run", "--config", str(TINY_YAML), "--model", "tiny-qwen2", "--out", str(b), "--quiet"]) == 0
    code, err = _compare(full, b, tmp_path / "ok", capsys)
    assert code == 0, err  # the finished runs compare
    no_markers = _copy(full, tmp_path, "no-markers")
    for stage in ("validate", "report"):
        (no_markers / stage / ".done.json").unlink()
    code, err = _compare(no_markers, b, tmp_path / "c1", capsys)
    assert classify(code, err, ("not a finished run", "validate: todo"), (tmp_path / "c1").exists()) == "clear"
    changed = _copy(full, tmp_path, "changed")
    key = changed / "identify" / "key_components.json"
    key.write_text(key.read_text().replace('"heads"', '"heads" ', 1))
    code, err = _compare(b, changed, tmp_path / "c2", capsys)
    assert classify(code, err, ("not a finished run", "identify: stale"), (tmp_path / "c2").exists()) == "clear"


# ---- one name per model -----------------------------------------------------------------------------------------


def test_a_model_alias_resolves_to_one_name():
    names = {RunConfig.from_dict({"model": {"source": s}}).model.source for s in ("gemma-3-270m", "gemma3-270m")}
    assert names == {"gemma3-270m"}
    assert RunConfig.from_dict({"model": {"source": "default"}}).model.source == "embedded"


def test_a_folder_made_under_an_alias_accepts_the_models_other_name(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / ".done.json").write_text("{}")  # a finished stage: the identity now binds the folder
    (tmp_path / ".run.json").write_text(json.dumps({"model": {"source": "gemma-3-270m", "device": "cpu",
                                                              "dtype": "float32", "threads": 0}}))  # fmt: skip
    check_run_folder(tmp_path, RunConfig.from_dict({"model": {"source": "gemma3-270m"}}))
    with pytest.raises(RunFolderError, match="holds a run of model 'gemma3-270m'.*Fix: use another --out"):
        check_run_folder(tmp_path, RunConfig.from_dict({"model": {"source": "embedded"}}))


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


def _reversed_char_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny tokenizer's characters with other ids: another tokenizer of the same size."""
    base = tiny_tokenizer()
    vocab = base.get_vocab()
    chars = sorted(vocab, key=vocab.get)
    core = Tokenizer(
        tokenizer_models.WordLevel({t: len(chars) - 1 - i for i, t in enumerate(chars)}, unk_token="<unk>")
    )
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )


# (id, call(model, pairs, key), exception, words)
VERBS: list[tuple[str, Callable, type, tuple[str, ...]]] = [
    ("faithfulness-given-key-heads", lambda m, p, k: faithfulness(m, p, list(k.heads)), TypeError,
     ("faithfulness: circuit must be a Circuit", "list of 3 Head")),
    ("faithfulness-given-key-components", lambda m, p, k: faithfulness(m, p, k), TypeError,
     ("circuit must be a Circuit", "a KeyComponents")),
    ("faithfulness-one-pair", lambda m, p, k: faithfulness(m, p.select([0]), discover_circuit(m, p, k, depth=0)),
     ValueError, ("faithfulness: dataset has 1 pair",)),
    ("faithfulness-n-boot-1", lambda m, p, k: faithfulness(m, p, discover_circuit(m, p, k, depth=0), n_boot=1),
     ValueError, ("faithfulness: n_boot=1", ">= 10")),
    ("faithfulness-n-random-negative",
     lambda m, p, k: faithfulness(m, p, discover_circuit(m, p, k, depth=0), n_random=-2), ValueError,
     ("faithfulness: n_random=-2",)),
    ("faithfulness-plateau-tol-negative",
     lambda m, p, k: faithfulness(m, p, discover_circuit(m, p, k, depth=0), plateau_tol=-0.1), ValueError,
     ("plateau_tol=-0.1",)),
    ("discover-threshold-negative", lambda m, p, k: discover_circuit(m, p, k, threshold=-1.0), ValueError,
     ("discover_circuit: threshold=-1.0",)),
    ("discover-n-boot-1", lambda m, p, k: discover_circuit(m, p, k, n_boot=1), ValueError, ("n_boot=1",)),
    ("discover-one-pair", lambda m, p, k: discover_circuit(m, p.select([0]), k), ValueError, ("1 pair",)),
    ("discover-given-rows", lambda m, p, k: discover_circuit(m, list(p), k), TypeError,
     ("discover_circuit: dataset must be prompt pairs", "list of 6 dict")),
    ("discover-given-the-tokenizer-as-model", lambda m, p, k: discover_circuit(m.tokenizer, p, k), TypeError,
     ("discover_circuit: model must be a HookedModel",)),
    ("select-given-an-empty-list", lambda m, p, k: select_key_components([]), TypeError,
     ("select_key_components: result must be a PatchingResult", "an empty list")),
    ("select-given-the-pairs", lambda m, p, k: select_key_components(p), TypeError,
     ("result must be a PatchingResult", "a Dataset")),
    ("path-patch-given-list-of-dicts", lambda m, p, k: path_patch(m, [dict(r) for r in p]), TypeError,
     ("path_patch: dataset must be prompt pairs", "list of 6 dict")),
    ("path-patch-given-a-prompt", lambda m, p, k: path_patch(m, "2 + 3 ="), TypeError,
     ("path_patch: dataset must be prompt pairs", "a str")),
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
     lambda m, p, k: score_pairs(m, generate_pairs(_reversed_char_tokenizer(), load_templates(),
                                                   GenerationConfig(operations=("add",), n_per_template=2))),
     ValueError, ("made with another tokenizer", "generate the pairs with this model's tokenizer")),
    ("score-pairs-token-ids-beyond-the-vocabulary",
     lambda m, p, k: score_pairs(m, p.remove_columns("tokenizer").map(lambda r: {"tokens": [*r["tokens"], 5000]})),
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
    assert len(set(pairs["tokenizer"])) == 1
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
def test_the_gpu_check_refuses_bad_flags_before_any_row(tmp_path, flags, words):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in flags]
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run", *argv],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    written = any(tmp_path.rglob("*.json"))
    assert classify(res.returncode, res.stderr + res.stdout, words, written) == "clear", res.stderr + res.stdout
    assert "device check on" not in res.stdout  # no row started


@pytest.mark.integration  # data, identify and numbers on the tiny model (about a minute)
def test_contexts_beyond_what_the_templates_give_are_capped_with_a_note(tmp_path):
    cfg = RunConfig.from_dict(
        {
            "model": {"source": "tiny-llama", "threads": 1},
            "data": {"operations": ["add"], "template_ids": ["add_eq_1"], "n_per_template": 4,
                     "keep_only_correct": False},
            "patching": {"min_pairs": 1, "max_pairs": 4},
            "selection": {"rule": "topk", "k": 2},
            "numbers": {"enabled": True, "context_operations": ["add"], "contexts": 40, "probe_folds": 30,
                        "numbers": [0, 19], "n_shuffles": 20, "n_boot": 20, "grid": [0, 3], "patch_pairs": 4,
                        "n_random_subspaces": 1},
        }
    )  # fmt: skip
    summary = run_pipeline(cfg, tmp_path / "run", only=["data", "identify", "numbers"], progress=False)["numbers"]
    note = next(line for line in summary.lines() if line.startswith("  note: "))
    assert "of the 40 asked for (numbers.contexts)" in note and "not 30" in note, note
