"""Every public function checks its arguments at the call (mathcircuits._checks), and every function that meets a
model checks that the pairs are this model's (``PairSet.require_model``).

The public functions are walked from the ``__all__`` of each public package at test time, so a function added or
removed there is covered without an edit here.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import warnings
from typing import Any

import pytest

import mathcircuits
import mathcircuits as mc
from mathcircuits.ablation import (
    ablated_accuracy,
    control_and_margin,
    control_margin_mediation,
    head_means,
    knockout_curve,
    mlp_margin,
    mlp_mediation,
    random_control,
)
from mathcircuits.ablation.config import ValidationConfig
from mathcircuits.analysis import attention_by_role, head_patterns, mlp_probes
from mathcircuits.circuit import (
    Circuit,
    EdgeScores,
    circuit_batches,
    copy_pairs,
    discover_circuit,
    eap_scores,
    exact_agreement,
    faithfulness,
    ig_convergence,
    label_roles,
    learn_edge_masks,
    mib_node_scores,
    mib_scores,
    node_scores,
    search_circuits,
)
from mathcircuits.data import GenerationConfig, PairSet, filter_correct, generate_pairs, score_pairs
from mathcircuits.numbers import NumbersConfig
from mathcircuits.patching import SelectionConfig, path_patch, select_key_components

from helpers import reversed_char_tokenizer, unchecked

#: functions whose first parameter takes anything (annotated ``Any``/``object`` or not at all), with the reason;
#: they cannot refuse a wrongly typed first argument by its type
ACCEPTS_ANYTHING = {
    "upstream_senders": "spec: a ModelSpec or anything with its shape fields (a saved run's spec dict too)",
    "model_depth": "model: a HookedModel, a bridge or a plain HF model (it reads the depth of each)",
    "repeat_cache": "cache: a prefix cache of any of the engine's layouts",
    "verify_once": "owner: any object the one-time check is remembered on",
    "register_study": "study: checked by its own StudyError (a study record is a duck-typed Study)",
    "setting": "default: a config field's default, of whatever type the field declares",
}


def _public_functions() -> dict[str, Any]:
    """Every function in the ``__all__`` of ``mathcircuits`` and of each public package ``mathcircuits.<pkg>``."""
    names = ["mathcircuits"] + [
        i.name for i in pkgutil.iter_modules(mathcircuits.__path__, "mathcircuits.") if i.ispkg and "._" not in i.name
    ]
    found: dict[str, Any] = {}
    for name in names:
        mod = importlib.import_module(name)
        for export in getattr(mod, "__all__", ()):
            fn = getattr(mod, export)
            if inspect.isfunction(fn) and fn.__module__.startswith("mathcircuits"):
                found.setdefault(f"{fn.__module__}.{fn.__qualname__}", fn)
    return found


def _takes_anything(fn: Any) -> bool:
    first = next(iter(inspect.signature(fn).parameters.values()))
    return first.annotation in (inspect.Parameter.empty, Any, object, "Any", "object")


def test_every_public_function_refuses_a_wrongly_typed_first_argument_naming_it():
    sentinel = object()
    functions = _public_functions()
    assert len(functions) > 100  # the walk found the packages' functions
    offenders, exempt = [], []
    for qualname, fn in functions.items():
        params = list(inspect.signature(fn).parameters.values())
        if not params:
            continue
        if _takes_anything(fn):
            exempt.append(fn.__name__)
            continue
        first = params[0]
        own = first.name in getattr(fn, "__own_checks__", ())  # the function's own, fuller message (own_checks)
        try:
            if own:  # as a user meets it: without the suite's beartype, the other required arguments None
                rest = [None for p in params[1:] if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
                with unchecked():
                    fn(sentinel, *rest)
            elif first.kind is first.KEYWORD_ONLY:
                fn(**{first.name: sentinel})
            else:
                fn(sentinel)
        except mc.FixableError as err:
            named = first.name if first.kind is not first.VAR_POSITIONAL else f"*{first.name}"
            text = " ".join(str(err).split())
            if text.count("Fix:") != 1:
                offenders.append(f"{qualname}: not one fix in {text}")
            elif not own and (
                getattr(err, "argument", None) != named
                or f"{fn.__name__}: {named} must be" not in text
                or "an object" not in text
            ):
                offenders.append(f"{qualname}: {text}")
        except Exception as err:  # noqa: BLE001  # any other end is what this test is about
            offenders.append(f"{qualname}: {type(err).__name__}: {err}"[:300])
        else:
            offenders.append(f"{qualname}: accepted object()")
    assert not offenders, "\n".join(offenders)
    unlisted = sorted(set(exempt) - set(ACCEPTS_ANYTHING))
    assert not unlisted, f"first parameter takes anything, without a reason in ACCEPTS_ANYTHING: {unlisted}"
    stale = sorted(set(ACCEPTS_ANYTHING) - set(exempt))
    assert not stale, f"ACCEPTS_ANYTHING lists functions that are not public or take a typed first argument: {stale}"


def test_a_checked_function_keeps_its_signature_identity_and_pickles():
    from mathcircuits.patching import driver

    assert mc.path_patch is driver.path_patch is mathcircuits.patching.path_patch
    params = inspect.signature(mc.path_patch).parameters
    assert list(params)[0] == "model" and params["model"].annotation == "HookedModel"  # the function's own
    assert pickle.loads(pickle.dumps(mc.path_patch)) is mc.path_patch
    err = pytest.raises(TypeError, mc.path_patch, "not a model", None).value
    back = pickle.loads(pickle.dumps(err))
    assert (back.function, back.argument, back.fix) == ("path_patch", "model", err.fix)


def test_a_monkeypatched_module_function_is_what_callers_meet(monkeypatch):
    from mathcircuits.stats import interval

    monkeypatch.setattr(interval, "wilson_interval", lambda *a, **k: "patched")
    assert interval.wilson_interval(1, 2) == "patched"


# ---- the examples: wrong types and over-large counts at the door -------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_llama, template_sets):
    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=6)
    pairs = score_pairs(tiny_llama, generate_pairs(tiny_llama.tokenizer, template_sets, cfg))
    key = select_key_components(path_patch(tiny_llama, pairs), SelectionConfig(rule="topk", k=3))
    _CIRCUITS[tiny_llama.spec.name] = discover_circuit(tiny_llama, pairs, key, depth=0)
    return tiny_llama, pairs, key


#: the circuit found on the tiny model's own pairs (the verbs that read a circuit take it with other pairs)
_CIRCUITS: dict[str, Circuit] = {}


def _scorer(model, pairs):
    """An unbuilt scorer: control_and_margin checks its pairs against the model before it uses the scorer, and
    building one on the bad pairs would be refused by the scorer's own check instead."""
    from mathcircuits.ablation import KnockoutScorer

    return KnockoutScorer.__new__(KnockoutScorer)


def _circuit(model, key) -> Circuit:
    return _CIRCUITS[model.spec.name]


def _edge_scores(model) -> EdgeScores:
    return EdgeScores(model.spec, False, (), (), "random", 0.0)


BAD_CALLS = [
    ("eap-steps-float", lambda m, p, k: eap_scores(m, p, steps=2.5), TypeError, ("eap_scores: steps", "float")),
    ("eap-steps-text", lambda m, p, k: eap_scores(m, p, steps="5"), TypeError, ("steps must be", "a str")),
    ("eap-steps-huge", lambda m, p, k: eap_scores(m, p, steps=10**9), ValueError,
     ("eap_scores: steps=1000000000 is out of range", "<= 1000", "backward pass")),
    ("node-scores-steps-huge", lambda m, p, k: node_scores(m, p, steps=10**9), ValueError, ("<= 1000",)),
    ("fresh-pairs-n-text", lambda m, p, k: mc.fresh_pairs(m, p, n="16"), TypeError,
     ("fresh_pairs: n must be a whole number", "a str ('16')")),
    ("fresh-pairs-n-huge", lambda m, p, k: mc.fresh_pairs(m, p, n=10**9), ValueError,
     ("fresh_pairs: n=1000000000 is out of range", "<= 100000")),
    ("knockout-n-random-negative", lambda m, p, k: knockout_curve(m, p, k, n_random=-3), ValueError,
     ("knockout_curve: n_random=-3 is out of range",)),
    ("knockout-n-random-huge", lambda m, p, k: knockout_curve(m, p, k, n_random=10**7), ValueError,
     ("n_random=10000000 is out of range", "<= 1000", "knockout scoring")),
    ("mib-scores-given-a-list", lambda m, p, k: mib_scores(m, list(p.dataset), _edge_scores(m)), TypeError,
     ("mib_scores: pairs must be prompt pairs", "a list of 6 dict")),
    ("mib-scores-given-a-path", lambda m, p, k: mib_scores(m, "pairs.json", _edge_scores(m)), TypeError,
     ("mib_scores: pairs must be prompt pairs", "a str ('pairs.json')")),
    ("n-shuffles-huge", lambda m, p, k: NumbersConfig(n_shuffles=10**8), ValueError,
     ("n_shuffles=100000000 is out of range", "<= 100000", "spectrum")),
    ("patch-pairs-huge", lambda m, p, k: NumbersConfig(patch_pairs=10**7), ValueError,
     ("patch_pairs=10000000 is out of range", "<= 100000", "patched at every depth")),
    ("ig-convergence-steps-huge", lambda m, p, k: ig_convergence(m, p, steps=(1, 10**9)), ValueError,
     ("ig_convergence: steps holds 1000000000, out of range", "<= 1000")),
    ("unknown-keyword", lambda m, p, k: mc.fresh_pairs(m, p, size=3), TypeError, ("size",)),
    ("search-objective", lambda m, p, k: search_circuits(m, p, objective="median"), ValueError,
     ("search_circuits: objective must be one of 'mean', 'pairs'", "'median'")),
    ("search-min-wins", lambda m, p, k: search_circuits(m, p, min_wins=1.5), ValueError,
     ("min_wins 1.5 is outside [0, 1]", "a share of the scoring pairs")),
    ("eap-aggregate", lambda m, p, k: eap_scores(m, p, aggregate="median"), ValueError,
     ("eap_scores: aggregate must be one of 'mean', 'magnitude'", "'median'")),
    ("node-aggregate-random", lambda m, p, k: node_scores(m, p, "random", aggregate="magnitude"), ValueError,
     ("node-score method 'random' with aggregate='magnitude'", "no effects to aggregate")),
    ("copy-pairs-counterfactual", lambda m, p, k: copy_pairs(m.tokenizer, 2, 0, counterfactual="letter"), ValueError,
     ("copy_pairs: counterfactual must be one of 'digit', 'marker'", "'letter'")),
]  # fmt: skip


@pytest.mark.parametrize("call, exc, words", [pytest.param(c, e, w, id=i) for i, c, e, w in BAD_CALLS])
def test_a_bad_argument_is_refused_at_the_call_naming_it(tiny, call, exc, words):
    model, pairs, key = tiny
    with pytest.raises(exc) as e:
        call(model, pairs, key)
    text = " ".join(str(e.value).split())
    assert all(w in text for w in words), text
    if isinstance(e.value, mc.FixableError):
        assert text.count("Fix:") == 1, text


# ---- pairs carry their tokenizer and the model that scored them ---------------------------------------------------

MEETS_A_MODEL = [
    ("path_patch", lambda m, p, k: path_patch(m, p)),
    ("knockout_curve", lambda m, p, k: knockout_curve(m, p, k, max_k=1, n_random=1)),
    ("attention_by_role", lambda m, p, k: attention_by_role(m, p, k)),
    ("discover_circuit", lambda m, p, k: discover_circuit(m, p, k, depth=0)),
    ("eap_scores", lambda m, p, k: eap_scores(m, p, method="eap")),
    ("mib_scores", lambda m, p, k: mib_scores(m, p, _edge_scores(m))),
    ("node_scores", lambda m, p, k: node_scores(m, p, "eap")),
    ("mib_node_scores", lambda m, p, k: mib_node_scores(m, p, node_scores(m, p.select([0]), "random"))),
    ("random_control", lambda m, p, k: random_control(m, p, k, n_draws=1)),
    ("ablated_accuracy", lambda m, p, k: ablated_accuracy(m, p, list(k.heads))),
    ("head_means", lambda m, p, k: head_means(m, p)),
    ("mlp_margin", lambda m, p, k: mlp_margin(m, p, list(k.heads), [0])),
    ("mlp_mediation", lambda m, p, k: mlp_mediation(m, p, list(k.heads), [0])),
    (
        "control_and_margin",
        lambda m, p, k: control_and_margin(
            m, p, list(k.heads), [0], ValidationConfig(control_draws=1, margin_draws=1), _scorer(m, p)
        ),
    ),
    (
        "control_margin_mediation",
        lambda m, p, k: control_margin_mediation(
            m, p, list(k.heads), [0], ValidationConfig(control_draws=1, margin_draws=1), _scorer(m, p)
        ),
    ),
    ("mlp_probes", lambda m, p, k: mlp_probes(m, p)),
    ("head_patterns", lambda m, p, k: head_patterns(m, p, k)),
    ("circuit_batches", lambda m, p, k: circuit_batches(m, p)),
    ("faithfulness", lambda m, p, k: faithfulness(m, p, _circuit(m, k))),
    ("label_roles", lambda m, p, k: label_roles(m, p, _circuit(m, k))),
    ("ig_convergence", lambda m, p, k: ig_convergence(m, p, steps=(1,))),
    ("exact_agreement", lambda m, p, k: exact_agreement(m, p, receivers=1)),
    ("search_circuits", lambda m, p, k: search_circuits(m, p, percentages=(0.5,))),
    ("learn_edge_masks", lambda m, p, k: learn_edge_masks(m, p, start=_edge_scores(m), steps=1)),
]

#: functions that take a model and pairs but do not check the pairs against the model, with the reason
READS_NO_TOKENS = {
    "score_pairs": "scoring is what records the model (scored_by); it checks the tokenizer (test_reliability3_verbs)",
    "fresh_pairs": "the given pairs are only the ones to avoid (by template and operands); it makes its own",
}


def test_every_function_that_meets_a_model_and_pairs_checks_them():
    """Each public function taking ``model`` and ``pairs`` is in MEETS_A_MODEL (so the three tests below call it),
    or says why its pairs need no check against the model."""
    meets = set()
    for fn in _public_functions().values():
        params = inspect.signature(fn).parameters
        if "model" in params and "pairs" in params:
            meets.add(fn.__name__)
    tested = {name for name, _ in MEETS_A_MODEL}
    assert meets - tested - set(READS_NO_TOKENS) == set(), "untested: add them to MEETS_A_MODEL"
    assert tested | set(READS_NO_TOKENS) <= meets


@pytest.mark.parametrize("name, call", [pytest.param(n, c, id=n) for n, c in MEETS_A_MODEL])
def test_pairs_of_another_tokenizer_are_refused_naming_both(tiny, template_sets, name, call):
    model, pairs, key = tiny
    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=6)
    theirs = generate_pairs(reversed_char_tokenizer(), template_sets, cfg)
    with pytest.raises(ValueError) as e:
        call(model, theirs, key)
    text = str(e.value)
    assert f"{name}: these pairs were made with another tokenizer" in text, text
    assert set(theirs.dataset["tokenizer"]) < set(text.replace("(", " ").replace(")", " ").replace(",", " ").split())
    assert text.count("Fix:") == 1


@pytest.mark.parametrize("name, call", [pytest.param(n, c, id=n) for n, c in MEETS_A_MODEL])
def test_pairs_without_the_tokenizer_fingerprint_are_refused_with_regenerate(tiny, name, call):
    model, pairs, key = tiny
    old = PairSet(pairs.dataset.remove_columns("tokenizer"))
    with pytest.raises(ValueError, match="carry no tokenizer fingerprint.*Fix: regenerate"):
        call(model, old, key)


@pytest.mark.parametrize("name, call", [pytest.param(n, c, id=n) for n, c in MEETS_A_MODEL])
def test_pairs_scored_by_another_model_are_refused(tiny, tiny_gpt2, name, call):
    model, pairs, key = tiny
    by_gpt2 = score_pairs(tiny_gpt2, pairs)
    with pytest.raises(ValueError) as e:
        call(model, by_gpt2, key)
    text = str(e.value)
    assert "scored by another model (tiny-gpt2:" in text and "tiny-llama:" in text, text


def test_score_pairs_records_the_model_and_rescoring_replaces_it(tiny, tiny_gpt2):
    model, pairs, _ = tiny
    assert set(pairs.dataset["scored_by"]) == {model.spec.fingerprint()}
    again = score_pairs(model, score_pairs(tiny_gpt2, pairs))
    assert set(again.dataset["scored_by"]) == {model.spec.fingerprint()}
    assert len(filter_correct(again)) == sum(again.correct)


def test_knockout_of_key_components_warns_on_the_pairs_that_chose_them(tiny):
    model, pairs, key = tiny
    assert key.source.pair_keys  # the selection remembers the pairs that chose it
    with pytest.warns(UserWarning, match="selection bias"):
        knockout_curve(model, pairs, key, max_k=1, n_random=1)


def test_mib_node_evaluation_warns_on_the_pairs_that_made_the_scores(tiny):
    model, pairs, _ = tiny
    made = node_scores(model, pairs.select([0, 1]), "random")
    assert not made.pair_keys  # random scores chose on no pairs: no warning
    scores = node_scores(model, pairs.select([0, 1]), "eap", metric="answer_logprob")
    assert scores.pair_keys
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mib_node_scores(model, pairs, scores, metric="answer_logprob", uncertainty=None)
        except (ValueError, KeyError):  # generated pairs lack MIB's counterfactual answers; the warning came first
            pass
    assert any("selection bias" in str(w.message) for w in caught)
