"""Reliability, round three: settings that depend on the data, compare-models, counts and identity.

Each bad input is driven through the CLI or the API and classified as the issue's tester did: ``clear`` (exit 2 or
the API's exception, one "Fix:", no traceback, naming the setting that fixes it, nothing written), ``traceback``
(an internal error), ``misleading`` (refused, but without the words that name the right setting) or ``silent``
(accepted): :func:`helpers.classify`. Every entry of the batteries below (and of ``test_reliability3_verbs.py``)
must come out ``clear``; the test ids are the inputs, and their number is the count the resolve note gives.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from mathcircuits.cli import main
from mathcircuits.pipeline import RunConfig, RunFolderError, run_pipeline
from mathcircuits.pipeline.config import multi_digit_template
from mathcircuits.pipeline.run import check_run_folder

from helpers import classify, sampled

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "configs" / "tiny.yaml"
TINY = yaml.safe_load(TINY_YAML.read_text())
NUMBERS_ON = {"enabled": True}


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


@pytest.mark.parametrize("sections, words", sampled([pytest.param(s, w, id=i) for i, s, w in CONFIGS]))
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_model_alias_resolves_to_one_name():
    names = {RunConfig.from_dict({"model": {"source": s}}).model.source for s in ("gemma-3-270m", "gemma3-270m")}
    assert names == {"gemma3-270m"}
    assert RunConfig.from_dict({"model": {"source": "default"}}).model.source == "embedded"


@pytest.mark.slow
def test_a_folder_made_under_an_alias_accepts_the_models_other_name(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / ".done.json").write_text("{}")  # a finished stage: the identity now binds the folder
    (tmp_path / ".run.json").write_text(json.dumps({"model": {"source": "gemma-3-270m", "device": "cpu",
                                                              "dtype": "float32", "threads": 0}}))  # fmt: skip
    check_run_folder(tmp_path, RunConfig.from_dict({"model": {"source": "gemma3-270m"}}))
    with pytest.raises(RunFolderError, match="holds a run of model 'gemma3-270m'.*Fix: use another --out"):
        check_run_folder(tmp_path, RunConfig.from_dict({"model": {"source": "embedded"}}))


@pytest.mark.integration  # data, identify and numbers on the tiny model (about a minute)
def test_contexts_beyond_what_the_templates_give_are_capped_with_a_note(tmp_path):
    cfg = RunConfig.from_dict(
        {
            "model": {"source": "tiny-llama", "threads": 1},
            "data": {"operations": ["add"], "template_ids": ["add_eq_1"], "n_per_template": 32,
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
