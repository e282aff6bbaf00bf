"""Stage ``circuit``: the circuit behind the key heads, its faithfulness and its graph (issue #12).

Reads the ``circuit`` section; for each operation with at least ``circuit.max_pairs`` correct
pairs (of its most frequent template, so the token roles sit at the same positions) writes
``circuit/circuit_<op>.json``, ``circuit/faithfulness_<op>.json`` and ``circuit/graph_<op>.html``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mathcircuits._io import atomic_path
from mathcircuits.circuit import discover_circuit, faithfulness, label_roles
from mathcircuits.patching import KeyComponents
from mathcircuits.pipeline.context import Context, StageSummary, select_pairs
from mathcircuits.viz.circuit_graph import circuit_graph

__all__ = ["CircuitBrief", "CircuitSummary", "run"]


@dataclass(frozen=True)
class CircuitBrief:
    """One operation's circuit, in brief: its size, faithfulness [95% interval] and the random baseline."""

    nodes: int
    edges: int
    faithfulness: float
    low: float
    high: float
    random_below: float  # share of random circuits of the same size less faithful
    n_random: int


@dataclass(frozen=True)
class CircuitSummary(StageSummary):
    """Per operation: nodes, edges and faithfulness with its interval."""

    circuits: dict[str, CircuitBrief] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    disabled: bool = False

    def lines(self) -> list[str]:
        if self.disabled:
            return ["  circuit: skipped (circuit.enabled is false)"]
        skipped = [
            f"  circuit {op}: skipped, {n} correct pairs of one template (fewer than circuit.max_pairs)"
            for op, n in self.skipped.items()
        ]

        def random(c: CircuitBrief) -> str:
            n = c.n_random
            return f"{c.random_below:.0%} of {n} random circuits below" if n else "no random circuits drawn"

        return skipped + [
            f"  circuit {op}: {c.nodes} nodes, {c.edges} edges; faithfulness {c.faithfulness:.3f} "
            f"[{c.low:.3f}, {c.high:.3f}], {random(c)}"
            for op, c in self.circuits.items()
        ]


def run(ctx: Context) -> CircuitSummary:
    """Discover each operation's circuit from the key heads and score its faithfulness.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    c, paths = ctx.config.circuit, ctx.paths
    if not c.enabled:
        return CircuitSummary(disabled=True)
    model = ctx.model
    key = KeyComponents.load(paths.key_components)
    key.check_model(model.spec)
    correct = ctx.load_dataset(paths.pairs_correct)
    out: dict[str, CircuitBrief] = {}
    skipped: dict[str, int] = {}
    for op in sorted(set(correct["operation"])):
        rows = correct.filter(lambda r, op=op: r["operation"] == op)
        template = Counter(rows["template_id"]).most_common(1)[0][0]
        rows = rows.filter(lambda r, t=template: r["template_id"] == t)
        if len(rows) < c.max_pairs:
            skipped[op] = len(rows)
            continue
        found = discover_circuit(
            model, select_pairs(rows, None, c.max_pairs), list(key.heads[: c.key_heads]), **c.discover_kwargs()
        )
        found = label_roles(model, select_pairs(rows, None, c.max_pairs), found)
        found.save(paths.circuit(op))
        faith = faithfulness(model, select_pairs(rows, None, c.faithfulness_pairs), found, **c.faithfulness_kwargs())
        faith.save(paths.circuit_faithfulness(op))
        with atomic_path(paths.circuit_graph(op)) as tmp:
            circuit_graph(found, faith).write_html(str(tmp), include_plotlyjs=True)
        out[op] = CircuitBrief(
            nodes=len(found.nodes) - 1,
            edges=len(found.edges),
            faithfulness=faith.faithfulness,
            low=faith.low,
            high=faith.high,
            random_below=faith.random_share_below if faith.random else 0.0,
            n_random=len(faith.random),
        )
    return CircuitSummary(circuits=out, skipped=skipped)
