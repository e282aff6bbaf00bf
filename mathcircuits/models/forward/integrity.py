"""Run-time integrity: every fast path proves itself on the user's own model, once per model and process.

The fast paths (prefix KV cache, the exact scan's last-position chain, knockout resumed mid-network, cached-prefix
generation, exact edges) are exact in exact arithmetic, but a dependency release can change what one computes
without raising (``transformers 5.24`` did: :mod:`mathcircuits.models.compat`). So before a fast path first runs
on a model, it runs once on a small probe batch both ways and compares:

    max |fast − plain|  ≤  rtol(dtype, depth) · max(1, max |plain|)
    rtol(dtype, depth)  =  max(RTOL[dtype], ROUNDING_MARGIN · u(dtype) · √(2 · depth))

Each of the ``2 · depth`` sub-blocks adds its output, rounded to the dtype (unit roundoff ``u``, 2⁻⁸ in bfloat16),
to the residual, so two correct paths differ by about ``u · √(2 · depth)`` of the readout's largest value;
``ROUNDING_MARGIN`` (4) covers independent rounding of the two paths (√2) and amplification through attention
and norms. Measured: 1.2 × ``u · √(2 · depth)`` on a random Llama-2-7B shape in bfloat16 on an H200, 0.6–2.6 ×
with GPU-like rounding simulated on a CPU (tests/test_tolerance.py, which also measures a dropped prefix cache
against it). ``RTOL`` is a floor per dtype (float32 paths differ by summation order, up to 2e-5).

A mismatch, or a registered hook that never fires, stops with :class:`IntegrityError`, naming the setting that
turns fast paths off (``model.fast_paths: off``; :func:`fast_paths`). Why: TransformerLens has had
hooks that silently never fired, so a fast path is trusted only after it matched the plain one.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import datasets
import torch
from jaxtyping import Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from mathcircuits._errors import FixableError
from mathcircuits._files import JSONObject
from mathcircuits.data.pairset import PairSet
from mathcircuits.data.tokenizer_id import ANY_TOKENIZER
from mathcircuits.models.compat import installed_versions
from mathcircuits.models.forward import verdicts
from mathcircuits.models.spec import Bridged

__all__ = [
    "IntegrityError",
    "fast_paths",
]

RTOL: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.float64: 1e-8, torch.bfloat16: 3e-2, torch.float16: 1e-2}
"""The floor of the relative tolerance, by the dtype the compared values were computed in.

Float32 fast paths differ from plain ones by summation order only (measured ≤ 2e-5 on logits of the
embedded model); the defects this guards against moved logits by 0.1–4."""

ROUNDING_MARGIN = 4.0
"""Multiple of the expected rounding difference ``u · √(2 · depth)`` that a correct fast path stays within."""


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the spacing of floating-point numbers at 1 (2⁻⁸ for bfloat16, 2⁻¹¹ for float16, 2⁻²⁴ for float32)."""
    return float(torch.finfo(dtype).eps) / 2 if dtype.is_floating_point else 0.0


def relative_tolerance(dtype: torch.dtype, depth: int = 1) -> float:
    """``max(RTOL[dtype], ROUNDING_MARGIN · u(dtype) · √(2 · depth))``, relative to ``max(1, max |plain|)``.

    ``depth`` is the blocks the computation passes through.
    """
    floor = RTOL.get(dtype, RTOL[torch.float32])
    return max(floor, ROUNDING_MARGIN * unit_roundoff(dtype) * math.sqrt(2 * max(1, int(depth))))


OFF_HINT = (
    "Fix: set `model.fast_paths: off` in the config (in Python: `with mathcircuits.models.fast_paths(False):`) "
    "to run every method on its plain path, or install the locked versions (bash scripts/setup.sh)."
)


class IntegrityError(FixableError, RuntimeError):
    """A fast path disagreed with its plain path on a probe batch, or a registered hook never fired."""


@dataclass(frozen=True)
class CheckRecord:
    """One run-time check: which path, on which model, the measured difference and the tolerance."""

    path: str
    model: str
    difference: float
    tolerance: float
    seconds: float = 0.0  # the check's own CPU time, less its nested checks' (process time: load-independent)
    cached: bool = False  # read from an earlier process's saved pass (:mod:`.verdicts`); ``seconds`` is the reading

    def to_dict(self) -> JSONObject:
        return {
            "path": self.path,
            "model": self.model,
            "difference": self.difference,
            "tolerance": self.tolerance,
            "seconds": round(self.seconds, 3),
            "cached": self.cached,
        }


_STATE = threading.local()
_VERIFIED: weakref.WeakKeyDictionary[Any, dict[str, CheckRecord]] = weakref.WeakKeyDictionary()
_RUNNING: set[tuple[int, str]] = set()
_RECORDS: list[CheckRecord] = []
_NESTED: list[float] = []


def fast_paths_enabled() -> bool:
    """Whether fast paths run (default) or every method takes its plain path."""
    return getattr(_STATE, "on", True)


def set_fast_paths(on: bool) -> None:
    """Turn fast paths on (each verified once per model) or off for this thread (``model.fast_paths``)."""
    _STATE.on = bool(on)


@contextmanager
def fast_paths(on: bool) -> Iterator[None]:
    """Within the block, fast paths are on or off (restored afterwards, also on errors)."""
    before = fast_paths_enabled()
    set_fast_paths(on)
    try:
        yield
    finally:
        set_fast_paths(before)


def _versions_text() -> str:
    v = installed_versions(("transformers", "transformer-lens", "torch", "peft"))
    return ", ".join(f"{k} {x}" for k, x in v.items())


def _model_name(owner: Any) -> str:
    cfg = getattr(owner, "cfg", None) or getattr(owner, "config", None)
    name = getattr(cfg, "model_name", None) or getattr(cfg, "_name_or_path", None)
    return str(name or type(owner).__name__)


def compare(
    fast: Tensor, plain: Tensor, dtype: torch.dtype | None = None, depth: int = 1, scale: float = 0.0
) -> tuple[float, float]:
    """The largest difference between a fast and a plain result, and the tolerance: ``(difference, tolerance)``.

    ``dtype`` is the precision they were computed in (a bfloat16 model's results cast to float32 still carry
    bfloat16 rounding); ``scale`` the scale their rounding is relative to when it exceeds ``max |plain|`` (an answer
    token's logit is rounded relative to the largest logit). A shape mismatch or a non-finite value gives ``inf``.
    """
    if fast.shape != plain.shape:
        return math.inf, 0.0
    a, b = fast.detach().double(), plain.detach().double()
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    largest = float(b.abs().max()) if b.numel() else 0.0
    tol = relative_tolerance(dtype or fast.dtype, depth) * max(1.0, largest, scale)
    return (diff if math.isfinite(diff) else math.inf), tol


def verify_once(owner: Any, path: str, check: Callable[[], tuple[float, float]]) -> CheckRecord | None:
    """Run ``check`` the first time ``path`` is used on ``owner``; raise :class:`IntegrityError` if it fails.

    ``owner`` is the bridge or HF model the fast path runs on (results are kept per object); ``check`` runs both
    paths on a probe batch and returns ``(difference, tolerance)``. A pass saved by an earlier process on the same
    model, dtype, device, dependency versions and code is read instead (:mod:`.verdicts`). Returns the record,
    ``None`` when fast paths are off or the check itself is running.
    """
    if not fast_paths_enabled():
        return None
    try:
        done = _VERIFIED.setdefault(owner, {})
    except TypeError:  # an owner that cannot be weakly referenced: check every time
        done = {}
    if path in done:
        return done[path]
    key = (id(owner), path)
    if key in _RUNNING:  # the check itself runs the fast path
        return None
    start = time.process_time()
    _NESTED.append(0.0)  # the CPU time of checks that run inside this one, which their own records count
    try:
        saved = verdicts.load(owner, path)
        if saved is not None:
            diff, tol = saved["difference"], saved["tolerance"]
        else:
            _RUNNING.add(key)
            try:
                with torch.no_grad():
                    diff, tol = check()
            finally:
                _RUNNING.discard(key)
    finally:
        total, inner = time.process_time() - start, _NESTED.pop()
        if _NESTED:
            _NESTED[-1] += total
    record = CheckRecord(path, _model_name(owner), diff, tol, total - inner, saved is not None)
    if not diff <= tol:
        raise IntegrityError(
            f"run-time check failed: the {path} fast path differs from its plain path by {diff:.3g} "
            f"(tolerance {tol:.2g}) on a probe batch of {record.model}. Its results would be wrong, so the run "
            f"stops here. Installed: {_versions_text()}. This is a bug in mathcircuits or a change in a "
            f"dependency, not in your input. {OFF_HINT}"
        )
    done[path] = record
    _RECORDS.append(record)
    if saved is None:
        verdicts.save(owner, path, record.to_dict())
    return record


def checks_run(clear: bool = False) -> list[CheckRecord]:
    """The checks passed in this process so far, oldest first; ``clear`` forgets them (each stage records its own)."""
    out = list(_RECORDS)
    if clear:
        _RECORDS.clear()
    return out


def probe_tokens(
    vocab: int, device: torch.device | str = "cpu", rows: int = 3, seq: int = 12, shared: int = 8, seed: int = 0
) -> Int[Tensor, "rows seq"]:
    """A deterministic probe batch: ``rows`` prompts of ``seq`` random tokens sharing their first ``shared``.

    Ids are drawn below ``min(vocab, 5000)``; the prefix fast paths need ``shared ≥ 4``.
    """
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(1, max(2, min(vocab, 5000)), (rows, seq), generator=g)
    toks[:, :shared] = toks[0, :shared]
    return toks.to(device)


def probe_pairs(vocab: int, rows: int = 4, seq: int = 12, shared: int = 8, seed: int = 0) -> PairSet:
    """Token-aligned probe pairs for the checks of patching, knockout and edges.

    The counterfactual differs from the prompt at position ``seq − 3`` (after the shared prefix); each answer
    has two tokens, so teacher-forced scoring reads two positions.
    """
    toks = probe_tokens(vocab, "cpu", rows, seq, shared, seed)
    g = torch.Generator().manual_seed(seed + 1)
    top = max(2, min(vocab, 5000))
    cf = toks.clone()
    cf[:, seq - 3] = (toks[:, seq - 3] + 1 + torch.randint(0, top - 2, (rows,), generator=g)) % top
    answers = torch.randint(1, top, (rows, 2), generator=g)
    return PairSet(
        datasets.Dataset.from_dict(
            {
                "tokens": toks.tolist(),
                "cf_tokens": cf.tolist(),
                "answer_token": answers[:, 0].tolist(),
                "answer_tokens": answers.tolist(),
                "n_tokens": [seq] * rows,
                "template_id": ["probe"] * rows,
                "operation": ["probe"] * rows,
                "pair_id": list(range(rows)),
                "tokenizer": [ANY_TOKENIZER] * rows,  # random ids: no tokenizer made them
            }
        )
    )


def model_depth(model: Any) -> int:
    """The layers of a hooked model, a bridge or an HF model (1 when it says nothing)."""
    for owner in (getattr(model, "spec", None), getattr(model, "cfg", None), getattr(model, "config", None)):
        for name in ("n_layers", "num_hidden_layers"):
            value = getattr(owner, name, None)
            if isinstance(value, int) and value > 0:
                return value
    inner = getattr(model, "bridge", None) or getattr(model, "model", None)
    return model_depth(inner) if inner is not None and inner is not model else 1


def model_dtype(model: Bridged | torch.nn.Module) -> torch.dtype:
    """The dtype of a model's (first floating) parameters: the precision its forwards run in."""
    module = model if isinstance(model, torch.nn.Module) else model.bridge
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def _checked(name: str, fn: Callable[..., Any], fired: set[int], k: int) -> Callable[..., Any]:
    def hook(*args: Any, **kwargs: Any) -> Any:
        fired.add(k)
        return fn(*args, **kwargs)

    return hook


def instrument_hooks(bridge: TransformerBridge) -> TransformerBridge:
    """Make ``bridge.run_with_hooks`` raise :class:`IntegrityError` when a hook it got never fired (idempotent)."""
    if getattr(bridge, "_mathcircuits_hooks_checked", False):
        return bridge
    original = bridge.run_with_hooks

    def run_with_hooks(*args: Any, fwd_hooks: Sequence[tuple[Any, Callable[..., Any]]] = (), **kwargs: Any) -> Any:
        fired: set[int] = set()
        wrapped = [(name, _checked(str(name), fn, fired, k)) for k, (name, fn) in enumerate(fwd_hooks)]
        out = original(*args, fwd_hooks=wrapped, **kwargs)
        missing = [str(fwd_hooks[k][0]) for k in range(len(wrapped)) if k not in fired]
        if missing:
            raise IntegrityError(
                f"run-time check failed: hooks {missing[:5]}{' …' if len(missing) > 5 else ''} were registered but "
                f"never fired during the forward, so the intervention they carry was silently skipped. Installed: "
                f"{_versions_text()}. This is a bug in mathcircuits or a change in a dependency, not in your input. "
                f"{OFF_HINT}"
            )
        return out

    bridge.run_with_hooks = run_with_hooks
    bridge._mathcircuits_hooks_checked = True
    return bridge
