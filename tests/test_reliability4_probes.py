"""Reliability, round four, more probes: the newer surfaces given the inputs a new user gets wrong.

MIB graph files and evaluation, EAP settings, pairs from another tokenizer or scored by another model, argument
mistakes, the YAML loader, compare-models and the file system. Each input is driven through the API or the CLI and
its outcome classified as in the earlier rounds (:func:`helpers.classify`): every one must end ``clear`` (the API's
:class:`~mathcircuits.FixableError` or exit 2, one "Fix:", naming the input, nothing written). An API call is read
as the CLI would word it: a ``FixableError`` as ``error: <message>`` with exit 2, any other exception as a traceback,
a return as exit 0. The test ids are the inputs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

import mathcircuits as mc
from mathcircuits.ablation import ablated_accuracy, head_means, random_control
from mathcircuits.analysis import head_patterns, mlp_probes
from mathcircuits.circuit import (
    EdgeScores,
    discover_circuit,
    eap_scores,
    faithfulness,
    graph_edges,
    mib_node_scores,
    mib_scores,
    node_scores,
    read_graph,
    write_graph,
)
from mathcircuits.cli import main
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs, score_pairs
from mathcircuits.patching import KeyComponents, PatchingResult, SelectionConfig, path_patch, select_key_components

from helpers import classify, reversed_char_tokenizer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ctx(tiny_llama, tiny_gpt2, template_sets):
    m = tiny_llama
    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=6)
    p = score_pairs(m, generate_pairs(m.tokenizer, template_sets, cfg))
    key = select_key_components(path_patch(m, p), SelectionConfig(rule="topk", k=3))
    edges = graph_edges(m.spec, False)
    return SimpleNamespace(
        m=m,
        g2=tiny_gpt2,
        p=p,
        key=key,
        other=generate_pairs(reversed_char_tokenizer(), template_sets, cfg),
        by_g2=score_pairs(tiny_gpt2, p),
        circuit=discover_circuit(m, p, key, depth=0),
        scores=EdgeScores(m.spec, False, edges, tuple(0.01 * i for i in range(len(edges))), "eap", 1.0),
        g2_scores=EdgeScores(
            tiny_gpt2.spec,
            False,
            graph_edges(tiny_gpt2.spec, False),
            tuple(0.0 for _ in graph_edges(tiny_gpt2.spec, False)),
            "eap",
            1.0,
        ),  # fmt: skip
    )


def _snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _api(call: Callable[[], object]) -> tuple[int, str]:
    """An API call's outcome as the CLI words it: (exit code, stderr)."""
    try:
        call()
    except mc.FixableError as err:
        return 2, "error: " + " ".join(str(err).split())
    except Exception as err:  # noqa: BLE001  # any other end is what the probe is about: a traceback
        return 1, f"Traceback (most recent call last): {type(err).__name__}: {err}"
    return 0, ""


# ---- graph files and MIB evaluation ---------------------------------------------------------------------------


def _graph(c, tmp: Path, edit: Callable[[dict], object] | None = None, name: str = "g.json") -> Path:
    path = write_graph(c.scores, tmp / "made" / name)
    if edit is not None:
        d = json.loads(path.read_text())
        edit(d)
        path.write_text(json.dumps(d))
    return path


def _on(path: Path, read: Callable[[Path], object]) -> Callable[[], object]:
    """The probe's call: ``read`` of a file the setup made."""
    return lambda: read(path)


def _edited(edit: Callable[[dict], object]) -> Callable:
    """A probe's setup: a graph file of the tiny model changed by ``edit``, read back."""
    return lambda c, t: _on(_graph(c, t, edit), lambda g: read_graph(g, c.m.spec, False))


def _first_edge(d: dict) -> dict:
    return d["edges"][next(iter(d["edges"]))]


def _raw(tmp: Path, data: bytes) -> Path:
    path = tmp / "made" / "raw.json"
    path.parent.mkdir()
    path.write_bytes(data)
    return path


#: (id, setup(ctx, tmp) -> the call, words the refusal must hold)
API_PROBES: list[tuple[str, Callable, tuple[str, ...]]] = [
    ("graph-of-binary-bytes", lambda c, t: _on(_raw(t, b"\x00\xff\xfe" * 8), lambda g: read_graph(g, c.m.spec, False)),
     ("raw.json is not valid JSON",)),
    ("graph-an-empty-file", lambda c, t: _on(_raw(t, b""), lambda g: read_graph(g, c.m.spec, False)),
     ("raw.json is not valid JSON",)),
    ("graph-missing", lambda c, t: lambda: read_graph(t / "none.json", c.m.spec, False), ("none.json does not exist",)),
    ("graph-is-a-folder", lambda c, t: lambda: read_graph(t, c.m.spec, False), ("is a folder",)),
    ("graph-score-infinite",
     _edited(lambda d: _first_edge(d).update(score=float("inf"))),
     ("has score inf, not a finite number",)),
    ("graph-in_graph-a-number",
     _edited(lambda d: _first_edge(d).update(in_graph=1)),
     ("in_graph is 1", "not a JSON boolean")),
    ("graph-edge-of-layer-99",
     _edited(lambda d: d["edges"].update({"a99.h0->m0": {"score": 1.0, "in_graph": False}})),
     ("layer 99 is out of range",)),
    ("graph-edge-without-score",
     _edited(lambda d: _first_edge(d).pop("score")),
     ("has score None",)),
    ("graph-cfg-layers-as-text",
     _edited(lambda d: d["cfg"].update(n_layers="3")),
     ("cfg.n_layers is '3'",)),
    ("graph-node-as-text",
     _edited(lambda d: d["nodes"].update(input="yes")),
     ("node 'input'",)),
    ("read-graph-parallel-as-text", lambda c, t: _on(_graph(c, t), lambda g: read_graph(g, c.m.spec, "false")),
     ("read_graph: parallel must be True or False", "a str ('false')")),
    ("read-graph-given-the-model-for-its-spec", lambda c, t: _on(_graph(c, t), lambda g: read_graph(g, c.m, False)),
     ("read_graph: spec must be a ModelSpec", "a HookedModel")),
    ("write-graph-onto-a-folder", lambda c, t: ((t / "g.json").mkdir(), lambda: write_graph(c.scores, t / "g.json"))[1],
     ("g.json: a folder is where a file belongs",)),
    ("write-graph-under-a-file",
     lambda c, t: ((t / "f").write_text("x"), lambda: write_graph(c.scores, t / "f" / "g.json"))[1],
     ("a file is where a folder belongs",)),
    ("write-graph-arguments-swapped", lambda c, t: lambda: write_graph(str(t / "g.json"), c.scores),
     ("write_graph: scores must be an EdgeScores", "a str")),
    ("mib-scores-given-the-graph-file-as-scores",
     lambda c, t: _on(_graph(c, t), lambda g: mib_scores(c.m, c.p, str(g), metric="answer_logprob")),
     ("mib_scores: scores must be an EdgeScores", "a str")),
    ("mib-scores-percentages-above-one",
     lambda c, t: lambda: mib_scores(c.m, c.p, c.scores, metric="answer_logprob", percentages=(0.5, 2.0)),
     ("percentages [0.5, 2.0] must increase within (0, 1]",)),
    ("mib-scores-run-misspelt", lambda c, t: lambda: mib_scores(c.m, c.p, c.scores, run="mask"),
     ("mib_scores: run must be one of 'masked', 'positions'", "'mask'")),
    ("mib-scores-metric-misspelt", lambda c, t: lambda: mib_scores(c.m, c.p, c.scores, metric="logit-diff"),
     ("mib_scores: metric must be one of", "'logit-diff'")),
    ("mib-scores-edge-scores-of-another-model",
     lambda c, t: lambda: mib_scores(c.m, c.p, c.g2_scores, metric="answer_logprob"),
     ("these edge scores", "tiny-gpt2", "tiny-llama")),
    ("mib-scores-on-no-pairs", lambda c, t: lambda: mib_scores(c.m, c.p.select([]), c.scores, metric="answer_logprob"),
     ("mib_scores got an empty dataset (0 pairs)",)),
    ("mib-node-scores-of-another-model",
     lambda c, t: lambda: mib_node_scores(c.m, c.p, node_scores(c.g2, c.other.select([0]), "random")),
     ("node scores", "tiny-gpt2")),
    ("node-scores-method-misspelt", lambda c, t: lambda: node_scores(c.m, c.p, "eap_ig"),
     ("node_scores: method must be one of", "'eap_ig'")),
    ("node-scores-steps-huge", lambda c, t: lambda: node_scores(c.m, c.p, "eap-ig", steps=5000),
     ("node_scores: steps=5000 is out of range", "<= 1000")),
    # EAP settings
    ("eap-method-in-capitals", lambda c, t: lambda: eap_scores(c.m, c.p, method="EAP"),
     ("eap_scores: method must be one of 'eap', 'eap-ig'", "'EAP'")),
    ("eap-steps-0", lambda c, t: lambda: eap_scores(c.m, c.p, steps=0), ("eap_scores: steps=0 is out of range",)),
    ("eap-steps-true", lambda c, t: lambda: eap_scores(c.m, c.p, steps=True),
     ("eap_scores: steps must be a whole number", "a bool (True)")),
    ("eap-batch-size-0", lambda c, t: lambda: eap_scores(c.m, c.p, method="eap", metric="answer_logprob", batch_size=0),
     ("batch_size is 0",)),
    ("eap-metric-misspelt", lambda c, t: lambda: eap_scores(c.m, c.p, metric="logprob"),
     ("eap_scores: metric must be one of", "'logprob'")),
    ("eap-progress-as-text", lambda c, t: lambda: eap_scores(c.m, c.p, progress="no"),
     ("eap_scores: progress must be True or False or None",)),
    ("eap-on-no-pairs", lambda c, t: lambda: eap_scores(c.m, c.p.select([]), method="eap"),
     ("eap_scores got an empty dataset (0 pairs)",)),
    # pairs of another tokenizer, or scored by another model, at every verb that reads them with a model
    ("head-patterns-other-tokenizer", lambda c, t: lambda: head_patterns(c.m, c.other, c.key),
     ("head_patterns: these pairs were made with another tokenizer",)),
    ("mlp-probes-other-tokenizer", lambda c, t: lambda: mlp_probes(c.m, c.other),
     ("mlp_probes: these pairs were made with another tokenizer",)),
    ("ablated-accuracy-other-tokenizer", lambda c, t: lambda: ablated_accuracy(c.m, c.other, list(c.key.heads)),
     ("ablated_accuracy: these pairs were made with another tokenizer",)),
    ("random-control-other-tokenizer", lambda c, t: lambda: random_control(c.m, c.other, c.key),
     ("random_control: these pairs were made with another tokenizer",)),
    ("head-means-other-tokenizer", lambda c, t: lambda: head_means(c.m, c.other),
     ("head_means: these pairs were made with another tokenizer",)),
    ("faithfulness-other-tokenizer", lambda c, t: lambda: faithfulness(c.m, c.other, c.circuit),
     ("faithfulness: these pairs were made with another tokenizer",)),
    ("faithfulness-scored-by-another-model", lambda c, t: lambda: faithfulness(c.m, c.by_g2, c.circuit),
     ("faithfulness: these pairs were scored by another model", "tiny-gpt2")),
    ("ablated-accuracy-scored-by-another-model",
     lambda c, t: lambda: ablated_accuracy(c.m, c.by_g2, list(c.key.heads)),
     ("ablated_accuracy: these pairs were scored by another model",)),
    ("head-patterns-scored-by-another-model", lambda c, t: lambda: head_patterns(c.m, c.by_g2, c.key),
     ("head_patterns: these pairs were scored by another model",)),
    # argument mistakes
    ("path-patch-metric-misspelt", lambda c, t: lambda: path_patch(c.m, c.p, metric="logitdiff"),
     ("path_patch: metric must be one of", "'logitdiff'")),
    ("path-patch-arguments-swapped", lambda c, t: lambda: path_patch(c.p, c.m),
     ("path_patch: model must be a HookedModel", "a PairSet")),
    ("knockout-ablation-misspelt", lambda c, t: lambda: mc.knockout_curve(c.m, c.p, c.key, ablation="zero"),
     ("knockout_curve: ablation must be one of", "'zero'")),
    ("knockout-max-k-text", lambda c, t: lambda: mc.knockout_curve(c.m, c.p, c.key, max_k="4"),
     ("knockout_curve: max_k must be", "a str ('4')")),
    ("correct-pairs-operation-spelt-out", lambda c, t: lambda: mc.correct_pairs(c.m, "addition"),
     ("correct_pairs: operation must be one of 'add'", "'addition'")),
    ("correct-pairs-n-true", lambda c, t: lambda: mc.correct_pairs(c.m, "add", n=True),
     ("correct_pairs: n must be", "a bool (True)")),
    ("load-model-given-a-number", lambda c, t: lambda: mc.load_model(42), ("load_model: source must be", "an int")),
    ("select-key-components-given-pairs", lambda c, t: lambda: select_key_components(c.p),
     ("select_key_components: result must be a PatchingResult", "a PairSet")),
    ("fresh-pairs-n-a-float", lambda c, t: lambda: mc.fresh_pairs(c.m, c.p, n=2.0),
     ("fresh_pairs: n must be a whole number", "a float (2.0)")),
    ("discover-circuit-depth-negative", lambda c, t: lambda: discover_circuit(c.m, c.p, c.key, depth=-1),
     ("depth=-1 is out of range",)),
    # files a user hands over
    ("pair-set-load-of-a-file", lambda c, t: _on(_graph(c, t), lambda g: PairSet.load(g)),
     ("where a pair set saved by PairSet.save belongs",)),
    ("pair-set-load-of-an-empty-folder", lambda c, t: ((t / "pairs").mkdir(), lambda: PairSet.load(t / "pairs"))[1],
     ("a folder without a saved pair set",)),
    ("pair-set-save-onto-a-file",
     lambda c, t: ((t / "pairs").write_text("x"), lambda: c.p.save(t / "pairs"))[1],
     ("a file is where a saved pair set (a folder) belongs",)),
    ("key-components-load-of-a-graph-file", lambda c, t: _on(_graph(c, t), lambda g: KeyComponents.load(g)),
     ("is not a saved mathcircuits value",)),
    ("patching-result-load-of-a-broken-file",
     lambda c, t: ((t / "r.pt").write_bytes(b"PK\x03\x04broken"), lambda: PatchingResult.load(t / "r.pt"))[1],
     ("looks truncated or corrupted",)),
]  # fmt: skip


@pytest.mark.parametrize("setup, words", [pytest.param(s, w, id=i) for i, s, w in API_PROBES])
def test_an_api_probe_ends_clear(ctx, tmp_path, setup, words):
    call = setup(ctx, tmp_path)
    before = _snapshot(tmp_path)
    code, err = _api(call)
    written = _snapshot(tmp_path) != before
    assert classify(code, err, words, written) == "clear", (code, err, written)


def test_the_mib_evaluation_warns_when_it_scores_the_pairs_that_made_the_edge_scores(ctx):
    scores = eap_scores(ctx.m, ctx.p.select([0, 1]), method="eap", metric="answer_logprob")
    assert len(scores.pair_keys) == 2  # the scores remember the pairs that made them
    with pytest.warns(UserWarning, match=r"mib_scores evaluates on 2 of 6 pairs that made the edge scores"):
        mib_scores(ctx.m, ctx.p, scores, metric="answer_logprob", uncertainty=None, percentages=(0.5, 1.0))


def test_a_pair_set_passes_its_model_check_once(ctx, monkeypatch):
    """The check at the call is not repeated inside a loop: a set checked for a model is not checked again."""
    from mathcircuits.data import pairset

    fresh = PairSet(ctx.p.dataset)
    fresh.require_model(ctx.m, "first")
    monkeypatch.setattr(pairset, "tokenizer_fingerprint", lambda tok: pytest.fail("checked twice"))
    fresh.require_model(ctx.m, "second")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="scored by another model"):  # another model is checked anew
        PairSet(ctx.by_g2.dataset).require_model(ctx.m, "third")


# ---- the YAML loader and compare-models, through the CLI --------------------------------------------------------

YAML_PROBES: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("python-tag", b'model: !!python/object/apply:os.system ["echo hi"]\n',
     ("line 1 carries the tag !!python/object/apply:os.system", "without the tag")),
    ("alias", b"a: &x {source: tiny-llama}\nmodel: *x\n", ("line 2 uses an alias",)),
    ("duplicate-section", b"model:\n  source: tiny-llama\nmodel:\n  source: tiny-gpt2\n",
     ("key 'model' is given twice (lines 1 and 3)",)),
    ("a-list-not-a-mapping", b"- model\n- data\n", ("a config must be a mapping of sections, got list",)),
    ("tab-indent", b"model:\n\tsource: tiny-llama\n", ("is not valid YAML", "line 2")),
    ("not-utf8", b"model:\n  source: \xff\xfe\n", ("is not UTF-8 text (byte 0xff",)),
    ("yes-for-a-count", b"data:\n  n_per_template: yes\n", ("[data] n_per_template=True is not int",)),
    ("section-misspelt", b"modle:\n  source: tiny-llama\n", ("unknown config sections ['modle']",)),
]  # fmt: skip


@pytest.mark.parametrize("text, words", [pytest.param(t, w, id=i) for i, t, w in YAML_PROBES])
def test_a_config_file_probe_ends_clear(tmp_path, capsys, text, words):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text)
    out = tmp_path / "run"
    code = main(["run", "--config", str(cfg), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert classify(code, err, words, out.exists()) == "clear", err


COMPARE_PROBES: list[tuple[str, Callable[[Path], list[str]], tuple[str, ...]]] = [
    ("run-missing", lambda t: [str(t / "nope"), str(t / "nope"), "--out", str(t / "cmp")],
     ("nope is not a run folder: it does not exist",)),
    ("run-is-a-file", lambda t: [str(t / "f"), str(t / "f"), "--out", str(t / "cmp")],
     ("f is not a run folder: it is a file",)),
    ("run-is-an-empty-folder", lambda t: [str(t / "e"), str(t / "e"), "--out", str(t / "cmp")],
     ("e is not a run folder: it has no .run.json",)),
]  # fmt: skip


@pytest.mark.parametrize("argv, words", [pytest.param(a, w, id=i) for i, a, w in COMPARE_PROBES])
def test_a_compare_models_probe_ends_clear(tmp_path, capsys, argv, words):
    (tmp_path / "f").write_text("x")
    (tmp_path / "e").mkdir()
    code = main(["compare-models", *argv(tmp_path)])
    err = capsys.readouterr().err
    assert classify(code, err, words, (tmp_path / "cmp").exists()) == "clear", err
