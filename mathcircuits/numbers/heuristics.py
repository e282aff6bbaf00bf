"""The heuristic patterns of Nikankin et al. (2025) over an operand grid, and the rule that assigns one to a neuron.

Nikankin et al. find that the MLP neurons that matter for arithmetic each implement a simple heuristic: they fire
for an operand or result in a *range*, for a value ``≡ r (mod n)``, for a *digit* pattern, or for *identical*
operands. Patterns over the operands ``a``, ``b`` and the result ``c``:

* ``range``: ``x ∈ [lo, hi]`` for every interval of ``x``'s values (not the whole range);
* ``mod``: ``x ≡ r (mod n)`` for ``n = 2 … 9``;
* ``digit``: ``x``'s units digit is ``d``, or its tens digit is ``d``;
* ``identical``: ``a = b``.

A pattern equal to an earlier one on this grid (e.g. "units digit 3" and "in [3, 3]" on operands 0–9) is dropped,
keeping the simpler kind.

Criterion. A neuron implements the pattern of largest ``|r(v, m)|`` (Pearson, point-biserial, of its activation
``v`` with the pattern's indicator ``m``) when ``|r| ≥ min_corr`` (default 0.5); ``r > 0`` means it fires on the
pattern, ``r < 0`` off it; otherwise (or when constant) it is *unclassified*. The null: the same rule on each
neuron's activations shuffled over the grid cells, which keeps its distribution and destroys any relation to the
operands.

Reference: Nikankin, Reusch, Mueller & Belinkov, "Arithmetic Without Algorithms: Language Models
Solve Math with a Bag of Heuristics" (ICLR 2025), §3–4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__: list[str] = []

HeuristicKind = Literal["range", "mod", "digit", "identical"]
HEURISTIC_KINDS: tuple[str, ...] = get_args(HeuristicKind)
Operand = Literal["a", "b", "result"]


@dataclass(frozen=True)
class Heuristic:
    """One pattern over the grid.

    ``operand`` is ``a``, ``b`` or ``result`` (``identical`` uses both); ``params`` is ``(lo, hi)`` for a range,
    ``(n, r)`` for mod, ``(place, d)`` for a digit (place 1 or 10), ``()`` for identical.
    """

    kind: HeuristicKind
    operand: Operand
    params: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """E.g. ``"a in [3, 7]"``, ``"result mod 4 = 1"``, ``"b tens digit 5"``, ``"a = b"``."""
        if self.kind == "range":
            return f"{self.operand} in [{self.params[0]}, {self.params[1]}]"
        if self.kind == "mod":
            return f"{self.operand} mod {self.params[0]} = {self.params[1]}"
        if self.kind == "digit":
            return f"{self.operand} {'units' if self.params[0] == 1 else 'tens'} digit {self.params[1]}"
        return "a = b"

    def mask(
        self, a: Int[Tensor, " cell"], b: Int[Tensor, " cell"], result: Int[Tensor, " cell"]
    ) -> Bool[Tensor, " cell"]:
        """Where the pattern holds on the grid."""
        x = {"a": a, "b": b, "result": result}[self.operand]
        if self.kind == "range":
            return (x >= self.params[0]) & (x <= self.params[1])
        if self.kind == "mod":
            return x % self.params[0] == self.params[1]
        if self.kind == "digit":
            return (x // self.params[0]) % 10 == self.params[1]
        return a == b


def heuristic_library(
    a: Int[Tensor, " cell"], b: Int[Tensor, " cell"], result: Int[Tensor, " cell"], moduli: range = range(2, 10)
) -> tuple[Heuristic, ...]:
    """Every pattern of the module docstring that is neither constant nor a repeat on this grid."""
    cands: list[Heuristic] = []
    for op, x in (("a", a), ("b", b), ("result", result)):
        vals = sorted(set(x.tolist()))
        for i, lo in enumerate(vals):
            for hi in vals[i:]:
                if not (lo == vals[0] and hi == vals[-1]):
                    cands.append(Heuristic("range", op, (lo, hi)))
    for op in ("a", "b", "result"):
        cands += [Heuristic("mod", op, (n, r)) for n in moduli for r in range(n)]
    for op in ("a", "b", "result"):
        cands += [Heuristic("digit", op, (place, d)) for place in (1, 10) for d in range(10)]
    cands.append(Heuristic("identical", "a"))
    seen: set[bytes] = set()
    out = []
    for h in cands:
        m = h.mask(a, b, result)
        key = m.numpy().tobytes()
        if bool(m.all()) or not bool(m.any()) or key in seen:
            continue
        seen.add(key)
        out.append(h)
    return tuple(out)


def _standardise(x: Tensor) -> Tensor:
    x = x.double()
    sd = x.std(-1, keepdim=True, unbiased=False)
    return torch.where(sd > 1e-12, (x - x.mean(-1, keepdim=True)) / sd.clamp_min(1e-12), torch.zeros_like(x))


def match_patterns(
    acts: Float[Tensor, "neuron cell"], masks: Bool[Tensor, "pattern cell"], chunk: int = 512
) -> tuple[Int[Tensor, " neuron"], Float[Tensor, " neuron"]]:
    """The best-correlated pattern of each neuron and that correlation (signed; 0 for a constant neuron)."""
    pats = _standardise(masks.double())
    cells = acts.shape[1]
    best = torch.zeros(acts.shape[0], dtype=torch.long)
    corr = torch.zeros(acts.shape[0])
    for i in range(0, acts.shape[0], chunk):
        r = _standardise(acts[i : i + chunk]) @ pats.T / cells  # [neuron, pattern]
        j = (r.abs() - 1e-9 * (r < 0)).argmax(1)  # a tie between a pattern and its complement: the one it fires on
        best[i : i + chunk] = j
        corr[i : i + chunk] = r.gather(1, j[:, None])[:, 0].float()
    return best, corr


def null_classified(
    acts: Float[Tensor, "neuron cell"],
    masks: Bool[Tensor, "pattern cell"],
    min_corr: float,
    draws: int = 3,
    seed: int = 0,
) -> float:
    """Mean count of neurons the rule classifies when each neuron's activations are shuffled over the cells."""
    gen = torch.Generator().manual_seed(seed)
    counts = []
    for _ in range(draws):
        order = torch.argsort(torch.rand(acts.shape, generator=gen), dim=1)
        _, corr = match_patterns(acts.gather(1, order), masks)
        counts.append(float((corr.abs() >= min_corr).sum()))
    return sum(counts) / len(counts)
