"""The value the MLP probes return: per-pair, per-layer probes of the MLPs against the unembedding.

The quantities are defined in :mod:`mathcircuits.analysis.mlp_probes`. The result reads off the first
layer that raises the answer and the first whose logit lens ranks it top-1, each with a bootstrap interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, get_args

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.data import Operation
from mathcircuits.data.pairs import operation_rows
from mathcircuits.models.spec import ModelSpec
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_indices, bootstrap_mean
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY, wilson_interval

__all__ = [
    "MLPProbeResult",
    "ProbeSettings",
    "Space",
]

#: The spaces the MLP vectors are compared in (see :mod:`mathcircuits.analysis.mlp_probes`).
Space: TypeAlias = Literal["lens", "raw"]
SPACES: tuple[str, ...] = get_args(Space)
PROBES = (  # the per-pair, per-layer fields; lens_prob last
    "input_sim_a",
    "input_sim_b",
    "input_sim_answer",
    "input_sim_others",
    "update_sim_answer",
    "update_sim_others",
    "update_direct_answer",
    "update_direct_margin",
    "lens_rank",
    "lens_prob",
)

#: The per-layer quantities that carry an interval (:meth:`MLPProbeResult.by_layer`).
LayerQuantity: TypeAlias = Literal["update_direct_margin", "update_sim_answer", "lens_top1"]


@dataclass(frozen=True)
class ProbeSettings:
    """The probes' settings: the largest candidate number, top numbers/tokens kept per layer, batch size."""

    max_number: int = 9
    top_k: int = 5
    batch_size: int = 16


@dataclass(frozen=True, repr=False)
class MLPProbeResult(SavedResult):
    """Per-pair, per-layer probes of the MLPs against the unembedding (see the module docstring)."""

    STAGE = "analyze"

    model: ModelSpec
    space: Space
    input_sim_a: Float[Tensor, "pair layer"]
    input_sim_b: Float[Tensor, "pair layer"]
    input_sim_answer: Float[Tensor, "pair layer"]
    input_sim_others: Float[Tensor, "pair layer"]
    update_sim_answer: Float[Tensor, "pair layer"]
    update_sim_others: Float[Tensor, "pair layer"]
    update_direct_answer: Float[Tensor, "pair layer"]
    update_direct_margin: Float[Tensor, "pair layer"]
    lens_rank: Float[Tensor, "pair layer"]
    lens_prob: Float[Tensor, "pair layer"]
    operations: list[str]
    pair_ids: list[int]
    answers: list[str]
    candidate_numbers: list[int]
    candidate_tokens: list[int]
    candidate_texts: list[str]
    case_row: int
    case_prompt: str
    case_answer: str
    case_answer_label: str
    case_top_numbers: list[list[str]]
    case_top_number_scores: Float[Tensor, "layer k_num"]
    case_top_tokens: list[list[str]]
    case_top_token_scores: Float[Tensor, "layer k_tok"]
    case_lens_top: list[str]
    settings: ProbeSettings = ProbeSettings()

    def __post_init__(self) -> None:
        if self.space not in SPACES:
            raise FixableValueError(f"space {self.space!r} is unknown. ", f"use one of {SPACES}.")

    @property
    def n_layers(self) -> int:
        return int(self.input_sim_a.shape[1])

    def operation_names(self) -> list[str]:
        return list(dict.fromkeys(self.operations))

    def rows(self, operation: Operation | None = None) -> Tensor:
        return operation_rows(self.operations, operation)

    def first_raising_layer(self, operation: Operation | None = None, min_margin: float = 0.25) -> int | None:
        """First layer whose MLP update, on average over pairs, raises the answer above the other numbers.

        That is, mean ``update_direct_margin`` > ``min_margin`` (logits); None if no layer does.
        """
        return _first_raising(self.update_direct_margin[self.rows(operation)], min_margin)

    def lens_top1_layer(self, operation: Operation | None = None, min_share: float = 0.5) -> int | None:
        """First layer after which the logit lens ranks the answer top-1 for ≥ ``min_share`` of the pairs, or None."""
        return _lens_top1(self.lens_rank[self.rows(operation)], min_share)

    def layer_interval(
        self,
        which: str,
        operation: Operation | None = None,
        uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    ) -> Interval:
        """Bootstrap interval of :meth:`first_raising_layer` (``which="raising"``) or :meth:`lens_top1_layer`
        (``which="lens_top1"``), both at their default thresholds, resampling the pairs.

        In layers; "no such layer" counts as ``n_layers`` (in the value too).
        """
        fn = {"raising": (_first_raising, self.update_direct_margin), "lens_top1": (_lens_top1, self.lens_rank)}
        if which not in fn:
            raise FixableValueError(f"which={which!r} is unknown. ", "use 'raising' or 'lens_top1'.")
        f, data = fn[which]
        data = data[self.rows(operation)]

        def layer(x: Tensor) -> int:
            got = f(x)
            return self.n_layers if got is None else got

        n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
        boots = torch.tensor([float(layer(data[i])) for i in bootstrap_indices(data.shape[0], n_boot, seed)])
        alpha = 1 - confidence
        q = torch.quantile(boots, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=boots.dtype), interpolation="nearest")
        return Interval(float(layer(data)), float(q[0]), float(q[1]), int(data.shape[0]), confidence, "bootstrap", seed)

    def by_layer(
        self, name: LayerQuantity, operation: Operation | None = None, uncertainty: Uncertainty = DEFAULT_UNCERTAINTY
    ) -> tuple[Interval, ...]:
        """Per layer, ``name``'s mean over the pairs of ``operation`` (all when None) with its interval: a bootstrap
        over pairs for the direct margin and the update's cosine with the answer, Wilson for ``lens_top1`` (the
        share of pairs whose logit lens ranks the answer top-1)."""
        if name not in get_args(LayerQuantity):
            raise FixableValueError(f"name={name!r} has no interval. ", f"use one of {list(get_args(LayerQuantity))}.")
        idx = self.rows(operation)
        n, conf = len(idx), uncertainty.confidence
        if name == "lens_top1":
            return tuple(wilson_interval(int(k), n, conf) for k in (self.lens_rank[idx] == 0).sum(0).tolist())
        vals = getattr(self, name)[idx]
        lo, hi = bootstrap_mean(vals, uncertainty)
        return tuple(
            Interval(m, a, b, n, conf, "bootstrap", uncertainty.seed)
            for m, a, b in zip(vals.mean(0).tolist(), lo.tolist(), hi.tolist())
        )

    def layer_summary(self, operation: Operation | None = None, uncertainty: Uncertainty = DEFAULT_UNCERTAINTY):
        """One row per layer: means (and stds) over pairs of every probe, plus top-1 logit-lens accuracy.

        The direct margin and the update's cosine with the answer carry a bootstrap interval over pairs
        (``_low``/``_high``), the top-1 share a Wilson interval.
        """

        idx = self.rows(operation)
        out: dict[str, Any] = {"layer": list(range(self.n_layers))}
        for name in PROBES[:-1]:
            vals = getattr(self, name)[idx]
            out[name] = vals.mean(0).tolist()
            out[f"{name}_std"] = vals.std(0, unbiased=False).tolist()
            if name in get_args(LayerQuantity):
                ivs = self.by_layer(name, operation, uncertainty)
                out[f"{name}_low"], out[f"{name}_high"] = [iv.low for iv in ivs], [iv.high for iv in ivs]
        wil = self.by_layer("lens_top1", operation, uncertainty)
        out["lens_top1"] = [w.value for w in wil]
        out["lens_top1_low"], out["lens_top1_high"] = [w.low for w in wil], [w.high for w in wil]
        df = pd.DataFrame(out)
        df.insert(0, "operation", operation or "all")
        return df

    def to_dataframe(self):
        """Long form: one row per pair x layer with every probe."""

        n_pairs, n_layers = self.input_sim_a.shape
        p = torch.arange(n_pairs).repeat_interleave(n_layers).tolist()
        data: dict[str, Any] = {
            "pair_id": [self.pair_ids[i] for i in p],
            "operation": [self.operations[i] for i in p],
            "answer": [self.answers[i] for i in p],
            "layer": list(range(n_layers)) * n_pairs,
        }
        for name in PROBES:
            data[name] = getattr(self, name).flatten().tolist()
        return pd.DataFrame(data)

    def case_dataframe(self):
        """The chosen pair: per layer, the top numbers / tokens its MLP update promotes and the answer's lens rank."""

        rows = []
        for layer in range(self.n_layers):
            rows.append(
                {
                    "layer": layer,
                    "top_numbers": " ".join(self.case_top_numbers[layer]),
                    "top_number_effect": float(self.case_top_number_scores[layer, 0]),
                    "top_tokens": " | ".join(repr(t) for t in self.case_top_tokens[layer]),
                    "lens_top1": self.case_lens_top[layer],
                    "answer_lens_rank": int(self.lens_rank[self.case_row, layer]),
                    "answer_direct_effect": float(self.update_direct_answer[self.case_row, layer]),
                }
            )
        return pd.DataFrame(rows)

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, pairs, layers, space, and the first layer whose MLP raises the answer."""
        rise = self.first_raising_layer()
        return [
            ("model", self.model.name),
            ("pairs", str(len(self.pair_ids))),
            ("layers", str(self.n_layers)),
            ("space", self.space),
            ("answer first raised by", "none" if rise is None else f"MLP{rise}"),
        ]


def _first_raising(margin: Float[Tensor, "pair layer"], min_margin: float = 0.25) -> int | None:
    above = (margin.mean(0) > min_margin).nonzero()
    return int(above[0]) if len(above) else None


def _lens_top1(rank: Float[Tensor, "pair layer"], min_share: float = 0.5) -> int | None:
    above = ((rank == 0).float().mean(0) >= min_share).nonzero()
    return int(above[0]) if len(above) else None
