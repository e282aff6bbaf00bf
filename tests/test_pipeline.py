"""The pipeline on tiny random models: config schema, stage registry, skipping, resuming, stage outputs."""

import contextlib
import dataclasses
import io
import json
import re
import typing
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mathcircuits.ablation import KnockoutResult, RandomControl
from mathcircuits.cli import main
from mathcircuits.data import PairSet
from mathcircuits.data.facts import facts_of
from mathcircuits.finetune import Mode, SFTConfig
from mathcircuits.finetune.layouts import KV_POLICIES
from mathcircuits.patching import PatchingConfig, PatchingResult, SelectionConfig
from mathcircuits.patching.driver import METHODS
from mathcircuits.patching.key_components import RULES
from mathcircuits.patching.metrics import METRICS
from mathcircuits.pipeline import (
    LATER_SETTINGS,
    READ_ONLY_WHEN,
    ConfigError,
    FinetuneSection,
    RunConfig,
    fingerprinted,
    run_pipeline,
    stages,
)
from mathcircuits.pipeline.config import fingerprint, render_config
from mathcircuits.pipeline.run import done_summary, stage_status

ROOT = Path(__file__).resolve().parents[1]

STAGES = stages()


def _cli(*args: str) -> str:
    """The standard output of ``mathcircuits *args``, run in this process; it must succeed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main(list(args))
        except SystemExit as exc:  # --help
            code = exc.code
    assert code == 0, args
    return out.getvalue()


TINY = {
    "model": {"source": "tiny-llama"},
    "data": {
        "operations": ["add"],
        "template_ids": ["add_eq_1", "add_eq_2"],
        "n_per_template": 16,  # identify and validate each draw from their own share of the facts (about 35%)
        "keep_only_correct": False,
    },
    "patching": {"min_pairs": 1, "max_pairs": 3},  # identify takes 3 pairs of its facts; validate its own
    "selection": {"rule": "topk", "k": 2},
    "validation": {
        "knockout_max_k": 1,
        "n_random": 1,
        "control_draws": 3,
        "transfer_draws": 2,
        "max_pairs": 4,
        "transfer_templates": False,
        "transfer_multi_digit": False,
        "word_problem_sets": [],
    },
    "analysis": {"max_pairs": 4, "static_formats": []},
    "finetune": {"enabled": False},
    "evaluation": {"enabled": False},
}


def test_config_round_trip_and_errors(tmp_path):
    cfg = RunConfig.from_dict(TINY)
    back = RunConfig.load(cfg.save(tmp_path / "c.yaml"))
    assert back == cfg and back.data.template_ids == ("add_eq_1", "add_eq_2")
    (tmp_path / "c.toml").write_text('[model]\nsource = "tiny-gpt2"\n')
    assert RunConfig.load(tmp_path / "c.toml").model.source == "tiny-gpt2"
    with pytest.raises(ConfigError, match=r"\[data\] unknown keys \['n_pairs'\]"):
        RunConfig.from_dict({"data": {"n_pairs": 3}})
    with pytest.raises(ConfigError, match="unknown config sections"):
        RunConfig.from_dict({"dataa": {}})
    with pytest.raises(ConfigError, match=r"\[patching\] max_pairs='many' is not int"):
        RunConfig.from_dict({"patching": {"max_pairs": "many"}})
    with pytest.raises(ConfigError, match=r"\[finetune\] unknown keys \['mode'\]"):  # set per entry of `modes`
        RunConfig.from_dict({"finetune": {"mode": "full"}})


def test_config_sections_are_the_library_configs_with_one_default():
    """Choices equal the library's own tables, and each setting has one default, the library's.

    The selection's defaults live only in SelectionConfig (select_key_components takes one, or overrides of it).
    """
    hints = typing.get_type_hints(PatchingConfig)
    assert set(typing.get_args(hints["metric"])) == set(METRICS)  # every metric: path patching reads every answer token
    assert set(typing.get_args(hints["method"])) == set(METHODS)  # path_patch refuses another by the config's check
    assert set(typing.get_args(typing.get_type_hints(SelectionConfig)["rule"])) == set(RULES)
    assert set(typing.get_args(typing.get_type_hints(SFTConfig)["kv_policy"])) == set(KV_POLICIES)
    cfg = RunConfig()
    assert isinstance(cfg.finetune, SFTConfig)
    sft = SFTConfig()
    for name in ("learning_rate", "batch_size", "max_steps", "save_steps", "epochs", "kv_policy"):
        assert getattr(cfg.finetune, name) == getattr(sft, name), name
    assert cfg.finetune.sft("precise@4", progress=False) == SFTConfig(progress_bar=False, include_mlps=False)
    assert cfg.finetune.sft("precise+mlp", progress=False).include_mlps  # MLPs only when the mode says +mlp
    assert FinetuneSection(modes=(Mode.parse("full"),)).sft("full", True).mode == "full"


def test_config_show_prints_every_field_and_loads_back(tmp_path):
    shown = _cli("config", "--show")
    assert RunConfig.from_dict(yaml.safe_load(shown)) == RunConfig()
    for section, cls in RunConfig.sections().items():
        names = [f.name for f in dataclasses.fields(cls) if f.name not in getattr(cls, "HIDDEN", ())]
        block = shown.split(f"\n{section}:\n", 1)[1].split("\n\n")[0]
        for name in names:
            assert re.search(rf"^  {name}: .* # .*default", block, re.MULTILINE), f"{section}.{name} not shown"
    assert "max_k: 32" in shown and "int, >= 1" in shown and "one of 'zscore', 'threshold', 'topk'" in shown
    merged = _cli("config", "--config", str(ROOT / "configs" / "tiny.yaml"), "--show")
    assert RunConfig.from_dict(yaml.safe_load(merged)) == RunConfig.load(ROOT / "configs" / "tiny.yaml")
    assert "source: tiny-llama" in merged and yaml.safe_load(merged)["selection"]["k"] == 3
    assert render_config(RunConfig.from_dict(TINY)).count("\n  ") == shown.count("\n  ")  # same fields, other values


def test_config_show_gives_each_setting_once_with_its_help():
    """Every settable field of every section is one line of `config --show`, with the help its field declares."""
    shown = _cli("config", "--show")
    total = 0
    for section, cls in RunConfig.sections().items():
        after = shown.split(f"\n{section}:\n", 1)[1].splitlines()
        lines = after[: next(i for i, x in enumerate([*after, ""]) if not x.startswith("  "))]
        fields = [f for f in dataclasses.fields(cls) if f.name not in getattr(cls, "HIDDEN", ())]
        assert len(lines) == len(fields), section  # one line per setting, nothing else
        total += len(fields)
        for f in fields:
            mine = [line for line in lines if line.startswith(f"  {f.name}: ")]
            assert len(mine) == 1, f"{section}.{f.name} is shown {len(mine)} times"
            help_text = f.metadata.get("help", "")
            assert help_text.strip(), f"{section}.{f.name} declares no help"
            assert mine[0].endswith(f". {help_text}"), f"{section}.{f.name}: its help is not its line's end"
    assert total > 150  # the 11 sections' settable fields


def test_later_settings_name_real_settings_at_valid_values():
    """Each entry of the config's history names a section field, and its earlier value (or the reader's value)
    is one the config takes; at the earlier value the setting leaves the fingerprinted dict."""
    sections = RunConfig.sections()
    for e in LATER_SETTINGS:
        assert e.key in {f.name for f in dataclasses.fields(sections[e.section])}, e
        cfg = RunConfig.from_dict({e.section: {e.key: e.earlier_value}})
        assert e.key not in fingerprinted(cfg.to_dict())[e.section], e
    for r in READ_ONLY_WHEN:
        names = {f.name for f in dataclasses.fields(sections[r.section])}
        assert {r.key, r.reader} <= names, r
        read = RunConfig.from_dict({r.section: {r.reader: r.value}})
        assert r.key in fingerprinted(read.to_dict())[r.section]
    other = RunConfig.from_dict({"selection": {"rule": "zscore"}})
    assert "threshold_of" not in fingerprinted(other.to_dict())["selection"]


#: every stage's fingerprint of the shipped configs (no upstream markers). A change here makes every run folder
#: made from them stale: add a setting at the value that reproduces earlier runs to LATER_SETTINGS instead, unless
#: the outputs are meant to change.
PINNED = {
    "tiny.yaml": {
        "data": "98c087d27711f725", "identify": "a23f0384776d0cca", "validate": "46637dac09a26292",
        "analyze": "c1434e125b6bebb7", "circuit": "8c246052cf7e3256", "numbers": "dcb79771d885e4c2",
        "finetune": "bad89e21afb5bfb8", "evaluate": "2d76af56a7ac185f", "compare": "c4cd0344813454df",
        "report": "5ee88ae62fded84f",  # reads every study, and the sections they read, since the registry
    },
    "default.yaml": {
        "data": "dd6bb5634649dbfc", "identify": "568c5aece97fed38", "validate": "5958520e7a5dc031",
        "analyze": "452fa2a2f53475df", "circuit": "a94ecd7822bc1b4d", "numbers": "b29090ccfed89b14",
        "finetune": "064f1dba31799576", "evaluate": "4483f6b96cc5c392", "compare": "122df63ff7ff3ded",
        "report": "b0c2fa11c4044960",
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PINNED))
def test_fingerprints_of_the_shipped_configs_stay_as_they_were(name):
    """A stage's fingerprint: its name, its sections and the model's as fingerprints see them, its upstream
    markers (none here). The runner's own, read back from a run folder, is checked against this formula in
    test_a_setting_added_later_keeps_older_run_folders_valid_at_its_earlier_value."""
    d = fingerprinted(RunConfig.load(ROOT / "configs" / name).to_dict())
    model = {k: v for k, v in d["model"].items() if k not in ("fast_paths", "device_map")}
    got = {
        stage: fingerprint(stage, {s: d[s] for s in STAGES[stage].settings}, model, [None] * len(STAGES[stage].reads))
        for stage in STAGES
    }
    assert got == PINNED[name]


def test_registry_drives_cli_modules_and_docs():
    assert list(STAGES) == [
        "data",
        "identify",
        "validate",
        "analyze",
        "circuit",
        "numbers",
        "finetune",
        "evaluate",
        "compare",
        "report",
    ]
    for name, stage in STAGES.items():
        if name != "report":  # a study is one folder: its record, its stage, what it hands the report
            assert stage.run.__module__ == f"mathcircuits.pipeline.studies.{name}.stage"
            assert (ROOT / "mathcircuits" / "pipeline" / "studies" / name / "stage.py").exists()
        assert all(list(STAGES).index(u) < list(STAGES).index(name) for u in stage.reads)
        helptext = _cli(name, "--help")
        assert " ".join(stage.help.split()) in " ".join(helptext.split())
    doc = (ROOT / "docs" / "howto" / "run-the-pipeline.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|", doc, re.MULTILINE)
    assert [r[0] for r in rows] == list(STAGES)
    for name, sections, needs in rows:
        assert re.findall(r"`(\w+)`", sections) == list(STAGES[name].settings), name
        assert [n.strip() for n in needs.split(",") if n.strip() != "—"] == list(STAGES[name].reads), name


def test_no_run_folder_path_literals_outside_paths_module():
    literal = re.compile(r"""["'][^"'\n]+\.(pt|csv|json|html|jsonl)["']|["'](pairs_correct|pairs_scored|checkpoint-)""")
    for f in (ROOT / "mathcircuits" / "pipeline").rglob("*.py"):
        if f.name != "paths.py":
            hits = [
                line for line in f.read_text().splitlines() if literal.search(line) and "root /" not in line
            ]  # a benchmark folder is not the run folder
            assert not hits, f"{f}: {hits}"


@pytest.mark.integration
def test_pipeline_runs_skips_and_resumes(tmp_path):
    cfg = RunConfig.from_dict(TINY)
    out = tmp_path / "run"
    first = run_pipeline(cfg, out, only=["data", "identify"], progress=False)
    assert (out / "identify" / "key_components.json").exists()
    assert done_summary(out, "identify") == first["identify"]  # the typed summary round-trips through the marker
    assert first["identify"].rule == "topk" and first["data"].n_correct == first["data"].n_pairs == 32
    status = stage_status(out, cfg)
    assert status["data"].state == status["identify"].state == "done" and status["validate"].state == "todo"
    marker = (out / "identify" / ".done.json").stat().st_mtime_ns
    lines = []
    run_pipeline(cfg, out, only=["data", "identify", "validate"], progress=False, echo=lines.append)
    assert "[data] up to date, skipped" in lines and "[identify] up to date, skipped" in lines
    assert (out / "identify" / ".done.json").stat().st_mtime_ns == marker
    assert (out / "validate" / "knockout_add.csv").exists()
    # the knockout pairs are fresh: none of them chose the heads
    scored = RandomControl.load(out / "validate" / "control.pt")
    used = PatchingResult.load(out / "identify" / "patching_add.pt").pair_ids
    assert scored.identification_overlap == 0 and not set(scored.pair_ids) & set(used) and len(scored.pair_ids) == 4
    assert done_summary(out, "validate").overlap == {"add": 0}
    run_pipeline(cfg, out, progress=False)  # the remaining stages: analyze, finetune/evaluate (disabled here), report
    html = (out / "report" / "report.html").read_text()
    assert "plotly" in html.lower() and "unpkg.com" not in html
    assert (out / "report" / "figures" / "patching_overall.html").exists()
    assert not list(out.rglob("cache-*.arrow")), "datasets cache files left in the run folder"
    assert not (out / ".lock").exists()
    changed = RunConfig.from_dict({**TINY, "selection": {"rule": "topk", "k": 3}})
    st = stage_status(out, changed)
    assert st["data"].state == "done" and st["identify"].state == "stale"
    assert "config sections" in st["identify"].reason and st["validate"].reason == "upstream stage identify is stale"
    with pytest.raises(ConfigError, match="stale"):
        run_pipeline(changed, out, only=["validate"], progress=False)
    assert oct((out / "identify" / "key_components.json").stat().st_mode & 0o044) != "0o0"  # readable by others
    assert json.loads((out / "versions.json").read_text())["torch"]


@pytest.mark.integration
def test_heldout_templates_stay_out_of_identification_and_become_transfer_sets(tmp_path):
    data = {**TINY["data"], "heldout_templates": ["add_eq_2"]}
    validation = {**TINY["validation"], "transfer_held_in": False, "knockout_max_k": 2, "knockout_ks": [2]}
    cfg = RunConfig.from_dict(
        {**TINY, "data": data, "validation": validation, "selection": {"rule": "topk", "k": 1, "mlp_k": 0}}
    )
    out = tmp_path / "run"
    summaries = run_pipeline(cfg, out, only=["data", "identify", "validate"], progress=False)
    correct = PairSet.load(out / "data" / "pairs_correct")
    assert set(correct.template_ids) == {"add_eq_1"}, "a held-out template reached identification"
    assert summaries["data"].n_heldout == 16  # pairs of the held-out template, kept for transfer
    rows = {r.dataset: r for r in summaries["validate"].transfer}
    assert list(rows) == ["add held-out templates (add_eq_2)"], "transfer_held_in=False still scored found-on data"
    held = rows["add held-out templates (add_eq_2)"]
    # the held-out pairs of validate's facts, capped at validation.max_pairs
    assert held.n == 4 and not held.held_in and held.ablation == "position_mean"
    # the curve also measures k = the number of key heads (1), the point claim C2 reads
    assert KnockoutResult.load(out / "validate" / "knockout_add.pt").ks == [0, 1, 2]
    assert not (out / "validate" / "head_means.pt").exists(), "position-free means computed though nothing uses them"
    with pytest.raises(ConfigError, match="heldout_templates"):
        RunConfig.from_dict({**TINY, "data": {**TINY["data"], "heldout_templates": ["add_qa_1"]}})
    with pytest.raises(ConfigError, match="every template"):
        RunConfig.from_dict({**TINY, "data": {**TINY["data"], "heldout_templates": ["add_eq_1", "add_eq_2"]}})


NAN = float("nan")  # JSON holds an unmeasured accuracy as NaN

# what the stages of configs/tiny.yaml left in their markers (trimmed): the records between stages, as JSON holds them
SUMMARIES = {
    "data": {"seconds": 0.8, "n_pairs": 12, "n_correct": 12, "n_heldout": 0, "requested_per_template": 4,
             "accuracy_by_operation": [{"operation": "add", "n": 8, "accuracy": 0.0, "mean_p_answer": 0.0093}],
             "fewer_than_requested": {},
             "facts_by_stage": {"identify": 28, "validate": 28, "analyze": 8, "circuit": 16},
             "correct_by_stage": {"identify": 4, "validate": 4, "analyze": 1, "circuit": 3},
             "facts_shared_by_stages": 0},
    "identify": {"seconds": 1.3, "peak_memory": {"bytes": 52428800, "how": "cpu_rss", "devices": "cpu", "exact": True},
                 "correct_pairs": {"add": 8}, "patched_operations": ["add"],
                 "results": {"add": {"n_pairs": 8, "seconds": 0.27, "top_heads": [[2, 2, -0.1119], [1, 3, 0.0]]}},
                 "key_heads": [[2, 2]], "key_mlps": [1], "key_head_fraction": 0.25, "rule": "topk",
                 "top_heads": [[2, 2, -0.10877]], "stability": [0.795], "metric": "answer_logprob",
                 "totals": {"add": {"effect": [-1.2, -1.9, -0.6], "interval": "cluster_bootstrap",
                                    "top_shares": [-0.093, 0.0], "n_excluded": 0}},
                 "facts": {"facts": {"add": 4}, "overlap": {"validate": 0, "analyze": 0, "circuit": 0}}},
    "validate": {"seconds": 3.1,
                 "knockout": {"add": {"baseline": 0.5, "ranked_final": 0.0, "random_final_mean": 0.25,
                                      "random_final_std": 0.1, "k": 2}},
                 "transfer": [{"dataset": "add two-digit operands", "held_in": False, "n": 6, "n_correct": 0,
                               "clean_accuracy": 0.0, "clean_low": 0.0, "clean_high": 0.39,
                               "status": "not measurable on this model", "key_ablated_accuracy": NAN,
                               "key_low": NAN, "key_high": NAN, "random_ablated_accuracy": NAN,
                               "random_low": NAN, "random_high": NAN, "random_ablated_std": NAN,
                               "key_drop": NAN, "random_drop": NAN, "ablation": "position_mean",
                               "p_value": NAN, "n_draws": 0}],
                 "fresh_pairs": {"add": 4}, "overlap": {"add": 0},
                 "control": {"n_pairs": 4, "draws": 3, "baseline": 0.5, "key_drop": 0.5, "random_drop_mean": 0.0,
                             "percentile": 100.0, "p_value": 0.25, "mlp_margin_drop": 0.3, "templates": 2,
                             "mlp_mediated_share": 0.8, "random_mediated_share": 0.4},
                 "cross_operation": ["  key set of add (2 heads) knocked out: add +0.25 (shares 2 heads, Jaccard 1)"],
                 "facts": {"facts": {"add": 4}, "overlap": {"identify": 0, "analyze": 0, "circuit": 0}}},
    "circuit": {"seconds": 0.1, "skipped": {"sub": 4}, "disabled": False,
                "circuits": {"add": {"nodes": 5, "edges": 7, "stopped": "saturated", "discovery_pairs": 12,
                                     "eval_pairs": 32, "seconds": 9.5, "faith": "plateau at 4 edges",
                                     "ill_conditioned": False}},
                "facts": {"facts": {"add": 8}, "overlap": {"identify": 0, "validate": 0, "analyze": 0}}},
    "finetune": {"seconds": 4.0, "skipped": None, "train_pairs": 36, "heldout_pairs": 36, "key_heads": [[2, 2]],
                 "key_mlps": [1],
                 "runs": {"precise": {"heads": 3, "mlps": 0, "kv_shared_heads": 1, "n_trainable": 61440,
                                      "n_model_params": 122944, "steps": 2,
                                      "train_loss": 6.0648, "samples_per_second": 12.964, "runtime_s": 1.3,
                                      "resumed_from": None},
                          "full": {"heads": "all", "mlps": "all", "kv_shared_heads": 0, "n_trainable": 122944,
                                   "n_model_params": 122944, "steps": 2,
                                   "train_loss": 6.0648, "samples_per_second": 7.534, "runtime_s": 1.6,
                                   "resumed_from": "run/finetune/full/checkpoint-2"}}},
    "evaluate": {"seconds": 1.9, "skipped": None, "files": ["eval_base.pt"],
                 "table": [{"model": "base", "held-out arithmetic": 0.0, "train samples/s": NAN, "tuned params": 0}]},
    "compare": {"seconds": 60.0, "skipped": None, "train_pairs": 36, "validation_pairs": 8, "test_pairs": 12,
                "selected": {"precise": 0.01, "full": 1e-4}, "at_edge": {"precise": "largest"},
                "table": [{"mode": "precise", "seeds": 2, "math Δ": 4.2, "math Δ low": -1.0, "math Δ high": 9.5},
                          {"mode": "base", "learning rate": None, "rate at grid edge": "", "math Δ": 0.0}],
                "power": "MDD 8 points", "units": 11, "cpu_s": 120.5, "files": ["compare/table.csv"],
                "fewer_than_requested": {"validation": "4-4 per template of the 8 asked for (its 4 facts)"},
                "claims": [{"id": "C6b", "verdict": "does not hold",
                            "measurement": "precise − random −0.01 [−0.05, 0.02]"}]},
    "numbers": {"seconds": 30.0, "disabled": False, "reading": "last token of the operand",
                "bands": {"middle": [2.0, 10.0]}, "baseline_periods": [10.0], "kappa": {"mod 10": "0.91 at depth 3"},
                "helix": "periods 2, 10 at depth 3", "patch": "", "neurons": "",
                "skipped": {"neurons": {"problem": "the model answers only 0 of 16 grid prompts correctly, too few "
                                                   "to ablate", "fix": "use operands the model solves."}},
                "timings": {"states": 1.0}, "notes": []},
    "report": {"seconds": 4.6, "report": "report.html", "figures": 12, "static_formats": [],
               "claims": [{"id": "C1", "title": "key heads are sparse, mid-depth", "verdict": "not measured",
                           "measurement": "3 of 12 heads"}]},
}  # fmt: skip


@pytest.mark.parametrize("stage", sorted(SUMMARIES))
def test_stage_summaries_are_typed_records_that_round_trip(stage, tmp_path):
    """A summary's records come back as values (not dicts), checked by their types, and save as they were."""
    d = {"peak_memory": None, **json.loads(json.dumps(SUMMARIES[stage]))}  # a marker holds every field
    summary = STAGES[stage].summary.from_dict(d)
    assert json.dumps(summary.to_dict(), sort_keys=True) == json.dumps(d, sort_keys=True)
    for name in ("summary.json", "summary.pt"):  # a saved result like every other: save() and load()
        back = STAGES[stage].summary.load(summary.save(tmp_path / name))
        assert json.dumps(back.to_dict(), sort_keys=True) == json.dumps(d, sort_keys=True)
    records = [v for f in dataclasses.fields(summary) for v in _records(getattr(summary, f.name))]
    assert all(not isinstance(r, dict) or stage in ("evaluate", "compare") for r in records), records  # table rows
    assert str(summary)  # every line renders from the typed records
    with pytest.raises(ValueError, match="does not fit"):
        STAGES[stage].summary.from_dict({**d, "seconds": "slow"})


def _records(value):
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def test_stage_needs_upstream(tmp_path):
    with pytest.raises(ConfigError, match="needs stage 'data' first"):
        run_pipeline(RunConfig.from_dict(TINY), tmp_path / "r", only=["identify"], progress=False)


def _bench(tmp_path):
    bench = tmp_path / "bench" / "AddSub"
    bench.mkdir(parents=True)
    items = [{"instruction": f"What is {i} + 1?", "input": "", "output": "", "answer": str(i + 1)} for i in range(3)]
    bench.joinpath("test.json").write_text(json.dumps(items))
    return tmp_path / "bench"


@pytest.mark.integration
def test_finetune_and_evaluate_stages(tmp_path):
    ft = {
        "enabled": True,
        "max_steps": 2,
        "train_pairs_per_template": 2,
        "micro_batch_size": 2,
        "batch_size": 2,
        "save_steps": 0,
    }
    ev = {
        "enabled": True,
        "heldout_pairs_per_template": 2,
        "benchmarks": ["AddSub"],
        "limit": 2,
        "n_shot": 0,
        "max_new_tokens": 4,
        "root": str(_bench(tmp_path)),
    }
    cfg = RunConfig.from_dict({**TINY, "finetune": ft, "evaluation": ev})
    out = tmp_path / "run"
    summaries = run_pipeline(cfg, out, only=["data", "identify", "finetune", "evaluate"], progress=False)
    runs = summaries["finetune"].runs
    assert set(runs) == {"precise", "full"} and runs["precise"].steps == runs["full"].steps == 2
    assert 0 < runs["precise"].n_trainable < runs["full"].n_trainable == runs["full"].n_model_params
    assert (out / "finetune" / "precise" / "final" / "adapter_config.json").exists()
    train = set(PairSet.load(out / "finetune" / "train_pairs").prompts)
    held_pairs = PairSet.load(out / "finetune" / "heldout_pairs")
    held = set(held_pairs.prompts)
    assert held and not (train & held)
    train_facts = facts_of(PairSet.load(out / "finetune" / "train_pairs"))
    assert not facts_of(held_pairs) & train_facts  # no trained fact (operation, a, b), in any wording
    assert runs["precise"].mlps == 0 and runs["precise"].kv_shared_heads >= 0  # precise = key heads only
    table = pd.read_csv(out / "evaluate" / "table.csv")
    assert list(table.iloc[:, 0]) == ["base", "precise", "full"]
    assert {"held-out arithmetic", "held-out arithmetic Δ low", "AddSub"} <= set(table.columns)
    # the docs promise evaluate/eval_<label>.pt when benchmarks are configured: one per model, as listed
    written = sorted(Path(f).name for f in summaries["evaluate"].files)
    assert written == ["eval_base.pt", "eval_full.pt", "eval_precise.pt", "table.csv"]
    assert sorted(p.name for p in (out / "evaluate").iterdir() if not p.name.startswith(".")) == written
    # new settings: old checkpoints and final weights are discarded, not resumed
    old_final = (out / "finetune" / "full" / "final").exists()
    lr_changed = RunConfig.from_dict(
        {
            **TINY,
            "finetune": {
                **ft,
                "save_steps": 1,
                "learning_rate": 1e-3,
                "modes": ["precise", "precise@3", "precise@3+mlp"],
            },
        }
    )
    again = run_pipeline(lr_changed, out, only=["finetune"], progress=False).get("finetune")
    assert again.runs["precise"].steps == 2 and again.runs["precise"].resumed_from is None
    assert old_final and not (out / "finetune" / "full").exists()  # a mode no longer run leaves nothing behind
    assert again.runs["precise@3"].heads == again.runs["precise@3+mlp"].heads == 3
    assert again.runs["precise@3"].n_trainable < again.runs["precise@3+mlp"].n_trainable
    with pytest.raises(ConfigError, match="precise@K"):
        RunConfig.from_dict({**TINY, "finetune": {"enabled": True, "modes": ["precise@many"]}})


@pytest.mark.integration
def test_a_setting_added_later_keeps_older_run_folders_valid_at_its_earlier_value(tmp_path):
    """``data.counterfactual`` came after run folders existed: at ``operator`` (what runs did before) it leaves
    every fingerprint as it was, so the stages stay done; another value makes them stale."""
    # data.fewshot_operations' earlier value is "same" (the default is "every", which shows division too)
    cfg = RunConfig.from_dict({**TINY, "data": {**TINY["data"], "fewshot_operations": "same"}})
    assert cfg.data.counterfactual == "operator"
    run_pipeline(cfg, tmp_path / "r", only=["data"], progress=False)
    marker = json.loads((tmp_path / "r" / "data" / ".done.json").read_text())
    old = {**cfg.to_dict()}
    # the config before the later settings: data.counterfactual, data.fewshot_operations and model.device_map
    old["data"] = {k: v for k, v in old["data"].items() if k not in ("counterfactual", "fewshot_operations")}
    old["model"] = {k: v for k, v in old["model"].items() if k != "device_map"}
    assert marker["fingerprint"] == fingerprint(
        "data",
        {"model": old["model"], "data": old["data"]},
        {k: v for k, v in old["model"].items() if k != "fast_paths"},
        [],
    )
    assert stage_status(tmp_path / "r", cfg)["data"].state == "done"
    other = RunConfig.from_dict({**TINY, "data": {**TINY["data"], "counterfactual": "operands"}})
    assert stage_status(tmp_path / "r", other)["data"].state == "stale"
