"""Run-time integrity: each fast path proves itself on the model, hooks must fire, versions are checked,
and a failure no input explains is reported as internal.

Each fast path is broken on purpose (monkeypatched to return shifted values); the run-time check must stop the
run with the clear error (the path, the difference, the versions, the setting that turns fast paths off), and
the failing stage must leave no marker. With ``model.fast_paths: off`` the same broken code is never reached.
"""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import pytest
import tomllib
import torch
import yaml

import mathcircuits.ablation.scorer as scorer
import mathcircuits.circuit.edges as edges
import mathcircuits.evaluation.generation as generation
import mathcircuits.models.compat as compat
import mathcircuits.patching.exact as exact
from mathcircuits.cli import main
from mathcircuits.data import PairSet
from mathcircuits.models import IntegrityError, PrefixRunner, Readout, from_hf, hooks, load_model
from mathcircuits.models.forward.integrity import fast_paths, probe_pairs
from mathcircuits.models.tiny import tiny_model
from mathcircuits.patching import PatchingResult, path_patch
from mathcircuits.pipeline import RunPaths

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())


def _config(tmp_path: Path, **sections) -> Path:
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in TINY.items()}
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(tmp_path: Path, capsys, *extra: str, **sections) -> tuple[int, str, Path]:
    out = tmp_path / "run"
    code = main(["run", "--config", str(_config(tmp_path, **sections)), "--out", str(out), "--quiet", *extra])
    return code, capsys.readouterr().err, out


def _assert_stopped(code: int, err: str, out: Path, path: str, stage: str) -> None:
    assert code == 2, err
    text = " ".join(err.split())
    assert f"the {path} fast path differs from its plain path by" in text
    assert "transformers " in text and "transformer-lens " in text and "torch " in text
    assert "model.fast_paths: off" in text and "internal error" not in text
    assert not RunPaths(out).marker(stage).exists()  # the stage that met the defect wrote no marker


def _shift(value: float = 0.5):
    return lambda t: t + value


@pytest.mark.integration
def test_broken_prefix_cache_stops_the_run(tmp_path, capsys, monkeypatch):
    original = PrefixRunner._suffix_logits
    monkeypatch.setattr(PrefixRunner, "_suffix_logits", lambda self, t, p, **kw: original(self, t, p, **kw) + 0.5)
    code, err, out = _run(tmp_path, capsys)
    _assert_stopped(code, err, out, "prefix cache", "data")


@pytest.mark.integration
def test_broken_exact_readout_stops_the_run(tmp_path, capsys, monkeypatch):
    original = exact.token_scores  # the readout of every answer token (the default metric, answer_logprob)
    monkeypatch.setattr(exact, "token_scores", lambda *a, **k: [v if v is None else v + 0.5 for v in original(*a, **k)])
    code, err, out = _run(tmp_path, capsys)
    _assert_stopped(code, err, out, "exact path patching (answer tokens)", "identify")
    assert RunPaths(out).marker("data").exists()  # stages before it are kept


def test_broken_last_position_readout_stops_path_patching(monkeypatch):
    """Under a last-position metric, the first path patching checks the last-position scan (not the teacher-forced)."""
    original = exact.readout
    monkeypatch.setattr(exact, "readout", lambda *a, **k: Readout(original(*a, **k).logit + 0.5))
    model = from_hf(*tiny_model("llama", seed=3))
    with pytest.raises(IntegrityError, match="the exact path patching fast path differs"):
        path_patch(model, probe_pairs(model.spec.vocab_size), metric="logit_diff")


@pytest.mark.parametrize("part", ["head change", "mlp chain"])
def test_a_wrong_chain_in_the_sampled_layers_stops_path_patching(monkeypatch, part):
    """The check scans a sample of layers, not every sender: a chain that is wrong there must still stop the run."""
    if part == "head change":  # every head's residual change 1.5× too large (its MLPs and readout right)
        original = exact.attn_change
        monkeypatch.setattr(exact, "attn_change", lambda *a, **k: 1.5 * original(*a, **k))
    else:  # each MLP's recomputed change 10% too large
        original = exact.mlp_change
        monkeypatch.setattr(exact, "mlp_change", lambda *a, **k: 1.1 * original(*a, **k))
    model = from_hf(*tiny_model("llama", seed=3))
    with pytest.raises(IntegrityError, match=r"the exact path patching \(answer tokens\) fast path differs"):
        path_patch(model, probe_pairs(model.spec.vocab_size))


@pytest.mark.integration
def test_broken_knockout_resume_stops_the_run(tmp_path, capsys, monkeypatch):
    original = scorer.run_from_layer
    monkeypatch.setattr(scorer, "run_from_layer", lambda *a, **k: original(*a, **k) + 0.5)
    code, err, out = _run(tmp_path, capsys)
    _assert_stopped(code, err, out, "knockout (position_mean, scope all)", "validate")


@pytest.mark.integration
def test_broken_circuit_edges_stop_the_run(tmp_path, capsys, monkeypatch):
    original = edges.receiver_effects
    monkeypatch.setattr(edges, "receiver_effects", lambda *a, **k: original(*a, **k) + 0.5)
    circuit = {"enabled": True, "depth": 1, "discovery_pairs": 2, "eval_pairs": 2, "min_pairs": 4, "n_random": 1,
               "n_boot": 10, "points": 2, "completeness_sets": 0, "screen": None}  # fmt: skip
    code, err, out = _run(tmp_path, capsys, circuit=circuit)
    _assert_stopped(code, err, out, "circuit edges", "circuit")


def test_broken_generation_cache_stops_generation(monkeypatch):
    model, tok = tiny_model("llama", seed=3)
    original = generation.repeat_cache

    def corrupt(cache, batch):
        out = original(cache, batch)
        for layer in out.layers:
            layer.keys.mul_(1.5)
        return out

    monkeypatch.setattr(generation, "repeat_cache", corrupt)
    prompts = ["1 + 2 = 3\n4 + 5 = 9\n2 + 2 =", "1 + 2 = 3\n4 + 5 = 9\n7 + 1 ="]
    with pytest.raises(IntegrityError, match=r"generation prefix cache fast path differs .*model.fast_paths: off"):
        generation.generate_greedy(model, tok, prompts, max_new_tokens=2)
    with fast_paths(False):  # the plain path never reaches the broken code
        assert len(generation.generate_greedy(model, tok, prompts, max_new_tokens=2)) == 2


@pytest.mark.integration
def test_fast_paths_off_runs_plain_paths_only(tmp_path, capsys, monkeypatch):
    original = PrefixRunner._suffix_logits
    monkeypatch.setattr(PrefixRunner, "_suffix_logits", lambda self, t, p, **kw: original(self, t, p, **kw) + 0.5)
    monkeypatch.setattr(exact, "readout", lambda *a, **k: pytest.fail("the exact scan ran with fast paths off"))
    code, err, out = _run(tmp_path, capsys, "--only", "data", "identify", model={"fast_paths": "off"})
    assert code == 0, err
    marker = yaml.safe_load(RunPaths(out).marker("identify").read_text())
    assert marker["checks"] == []  # nothing fast ran, so nothing was checked
    assert PatchingResult.load(RunPaths(out).patching("add")).method == "reference"


@pytest.mark.integration
def test_checks_are_recorded_in_the_stage_markers(tmp_path, capsys):
    code, err, out = _run(tmp_path, capsys, "--only", "data", "identify")
    assert code == 0, err
    paths = RunPaths(out)
    recorded = {
        c["path"]: c
        for stage in ("data", "identify")
        for c in yaml.safe_load(paths.marker(stage).read_text())["checks"]
    }
    assert {"prefix cache", "exact path patching (answer tokens)"} <= set(recorded)
    assert all(0 <= c["difference"] <= c["tolerance"] for c in recorded.values())


@pytest.mark.parametrize("method", ["exact", "reference"])
def test_null_patch_reproduces_clean_logits(method):
    """Patching clean into clean changes nothing: every effect is zero, in raw logits."""
    model = load_model("tiny-llama")
    probe = probe_pairs(model.spec.vocab_size)
    null = PairSet(probe.dataset.map(lambda r: {"cf_tokens": r["tokens"]}))
    result = path_patch(model, null, metric="logit_diff", method=method)
    assert result.head_effects.abs().max() <= 1e-5 and result.mlp_effects.abs().max() <= 1e-5
    # and a forward with every head frozen at its own clean value is the clean forward
    toks = torch.tensor(probe.tokens)
    clean = model.bridge(toks)
    _, cache = model.bridge.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_z"))
    frozen = [(hooks.z(l), lambda a, hook, l=l: cache[hooks.z(l)]) for l in range(model.spec.n_layers)]
    assert (model.bridge.run_with_hooks(toks, fwd_hooks=frozen) - clean).abs().max() <= 1e-5
    # a real counterfactual does move something (the check above is not vacuous)
    assert path_patch(model, probe, metric="logit_diff", method=method).head_effects.abs().max() > 1e-3


def test_a_hook_that_never_fires_stops_the_forward():
    model = load_model("tiny-llama")
    toks = torch.tensor(probe_pairs(model.spec.vocab_size).tokens)
    fired = []
    model.bridge.run_with_hooks(toks, fwd_hooks=[(hooks.z(0), lambda a, hook: fired.append(1))])
    assert fired
    # a rotary model's bridge has a hook_pos_embed that its forward never calls: an edit there would be skipped
    assert "hook_pos_embed" in model.bridge.hook_dict
    with pytest.raises(IntegrityError, match=r"\['hook_pos_embed'\] were registered but never fired"):
        model.bridge.run_with_hooks(toks, fwd_hooks=[("hook_pos_embed", lambda a, hook: a * 0)])


def test_untested_versions_are_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    real = compat.installed_versions
    monkeypatch.setattr(compat, "installed_versions", lambda names=(): {**real(names), "transformers": "9.0.0"})
    code, err, out = _run(tmp_path, capsys)
    assert code == 2 and "transformers 9.0.0 (supported >=4.57,<5.25)" in err and "Fix:" in err
    assert not out.exists()
    monkeypatch.setenv(compat.ENV_SKIP, "1")
    assert compat.check_versions()["transformers"] == "9.0.0"


def test_supported_ranges_match_pyproject():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    bounds = {}
    for d in deps:
        m = re.match(r"([A-Za-z0-9_.-]+)>=([\d.]+),<([\d.]+)", d)
        if m:
            bounds[m.group(1).replace("_", "-").lower()] = (m.group(2), m.group(3))
    for name, rng in compat.SUPPORTED.items():
        assert bounds[name] == (rng.lowest, rng.below), name
    assert "5.24.0" in compat.SUPPORTED["transformers"] and "5.25.0" not in compat.SUPPORTED["transformers"]
    assert "2.13.0+cpu" in compat.SUPPORTED["torch"]
    tl = compat.SUPPORTED["transformer-lens"]  # 4.3 (the lock) and 3.9 (scripts/test-tl3.sh) only
    assert "4.3.0" in tl and "3.9.0" in tl and "3.8.0" not in tl and "4.4.0" not in tl and "4.2.1" not in tl


@pytest.mark.integration
def test_internal_error_is_reported_as_internal(tmp_path, capsys, monkeypatch):
    import mathcircuits.pipeline.studies.identify.stage as identify

    def boom(*a, **k):
        raise KeyError("not_a_column")

    monkeypatch.setattr(identify, "path_patch", boom)
    code, err, out = _run(tmp_path, capsys, "--only", "data", "identify")
    assert code == 3, err
    assert "internal error in stage identify: 'not_a_column'" in err
    assert "this is a bug in mathcircuits or a dependency; the versions are in versions.json" in err
    assert "correct the input" not in err
    tb = RunPaths(out).traceback("identify")
    assert tb.is_file() and "KeyError" in tb.read_text() and str(tb) in err
    assert not RunPaths(out).marker("identify").exists()


def test_input_errors_keep_their_fix(tmp_path, capsys):
    code, err, _ = _run(tmp_path, capsys, data={"operations": ["modulo"]})
    assert code == 2 and "Fix:" in err and "internal error" not in err


@pytest.mark.integration
def test_dependency_warnings_go_to_the_run_log(tmp_path, capsys):
    code, err, out = _run(tmp_path, capsys, "--only", "data")
    assert code == 0
    assert "FutureWarning" not in err and "Saving the dataset" not in err and "Filter:" not in err
    assert RunPaths(out).warnings_log.is_file()
    assert datasets.is_progress_bar_enabled()  # restored after the run
