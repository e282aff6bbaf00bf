"""Helpers of the test suite (not part of the library): interval coverage checks and the user's view of errors.

* :func:`coverage` and :func:`binomial_band` check that intervals cover a known truth as often as they
  claim: over ``n`` simulations the number of covering intervals is Binomial(n, nominal), so an
  observed coverage outside :func:`binomial_band` fails by chance with probability about 0.001.
* :func:`unchecked` runs code without the runtime type checks this suite installs
  (``--jaxtyping-packages``), as a user without a type checker runs it: a wrong value then reaches
  the library's own check, whose message (problem and fix) the test reads. With the checks on, the same
  value is refused earlier by the type checker (a ``TypeError`` naming the parameter).
* :func:`tiered` splits a test matrix between the tiers: the fast loop (``-m "not slow and not integration"``)
  runs a representative part, the whole matrix runs with the slow tier (CI runs every tier).
  :data:`FAST_FAMILIES` is that part of the family matrix.
* :func:`assert_clear` and :func:`classify` read a bad input's outcome as the user sees it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import jaxtyping
import pytest
import torch
from scipy.stats import norm
from torch import Tensor

#: the family matrix's fast part: one family per block shape (sequential + GQA, sandwich norms, post norms
#: only, parallel, parallel with one shared norm) and GPT-2 (Conv1D weights, learned positions).
FAST_FAMILIES = ("llama", "gemma2", "olmo2", "gpt_neox_parallel", "phi", "gpt2")


def tiered(values: Sequence, fast: Sequence) -> list:
    """Parameters of a test matrix: those in ``fast`` run in every tier, the others only in the slow tier.

    Args:
        values: every parameter (or tuple of parameters) of the matrix.
        fast: the representative ones the fast loop runs.

    Returns:
        ``values`` with the others wrapped as ``pytest.param(..., marks=pytest.mark.slow)``.
    """
    unknown = [v for v in fast if v not in values]
    assert not unknown, f"fast parameters {unknown} are not in the matrix"
    return [
        v if v in fast else pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.slow) for v in values
    ]


def sampled(params: Sequence, every: int = 2) -> list:
    """A battery of ``pytest.param`` cases: every ``every``-th runs in the fast loop, the rest only in the slow tier."""
    return [p if i % every == 0 else pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.slow])
            for i, p in enumerate(params)]  # fmt: skip


def coverage(lows: Sequence[float] | Tensor, highs: Sequence[float] | Tensor, truth: float | Tensor) -> float:
    """Share of intervals [low, high] that contain ``truth`` (per-interval truths allowed).

    Args:
        lows: lower bounds [sim].
        highs: upper bounds [sim].
        truth: the known value, a scalar or [sim].

    Returns:
        The observed coverage in [0, 1].
    """
    lo, hi = torch.as_tensor(lows, dtype=torch.float64), torch.as_tensor(highs, dtype=torch.float64)
    t = torch.as_tensor(truth, dtype=torch.float64)
    return float(((lo <= t) & (t <= hi)).double().mean())


def binomial_band(nominal: float, n_sims: int, confidence: float = 0.999) -> tuple[float, float]:
    """The range an observed coverage falls in when the true coverage is ``nominal``.

    Over ``n_sims`` independent simulations, the count of covering intervals is Binomial(n_sims, nominal);
    this returns its central ``confidence`` range as shares (normal approximation), so a test fails by chance
    with probability ≈ 1 − confidence.

    Args:
        nominal: the intervals' nominal coverage, e.g. 0.95.
        n_sims: number of simulations.
        confidence: how sure the band should be.

    Returns:
        ``(low, high)`` shares.
    """
    z = float(norm.ppf(0.5 + confidence / 2))
    half = z * math.sqrt(nominal * (1 - nominal) / n_sims)
    return max(0.0, nominal - half), min(1.0, nominal + half)


@contextlib.contextmanager
def unchecked() -> Iterator[None]:
    """Inside the block, the library runs without the suite's runtime type checks (as a user's code does)."""
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", before)


def assert_clear(code: int, err: str, words: tuple[str, ...], out: Path) -> None:
    """A bad input ended as one clear error (exit 2, one "Fix:", no traceback), naming ``words``; nothing written."""
    text = " ".join(err.split())
    assert code == 2, err
    assert text.startswith("error: ") and text.count("Fix:") == 1, text
    assert "Traceback" not in err and "internal error" not in text, text
    for w in words:
        assert w in text, (w, text)
    assert not out.exists(), f"{out} was written"


def classify(code: int | None, err: str, words: tuple[str, ...], written: bool) -> str:
    """The classes of a bad input's outcome: ``traceback`` (an internal error), ``silent`` (accepted without a
    word), ``misleading`` (refused, but not with exit 2, one "Fix:" and ``words``, or after writing) or ``clear``."""
    text = " ".join(err.split())
    if "Traceback" in err or "internal error" in text:
        return "traceback"
    if code in (0, None) and not text:
        return "silent"
    clear = text.startswith("error: ") and text.count("Fix:") == 1 and all(w in text for w in words)
    return "clear" if clear and code == 2 and not written else "misleading"


def script_module(name: str):
    """``scripts/<name>.py`` imported as module ``name`` (registered first: dataclasses look their module up)."""
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def reversed_char_tokenizer():
    """The tiny tokenizer's characters with other ids: another tokenizer of the same size (pairs it makes are
    another tokenizer's for the tiny models, yet every id lies inside their vocabulary)."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers import models as tokenizer_models
    from transformers import PreTrainedTokenizerFast

    from mathcircuits.models.tiny import tiny_tokenizer

    vocab = tiny_tokenizer().get_vocab()
    chars = sorted(vocab, key=vocab.get)
    core = Tokenizer(
        tokenizer_models.WordLevel({t: len(chars) - 1 - i for i, t in enumerate(chars)}, unk_token="<unk>")
    )
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )
