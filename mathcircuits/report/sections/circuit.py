"""One section per circuit (circuit stage): how it was found, its faithfulness curve, the plateau circuit's graph."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.circuit import Circuit, Faithfulness
from mathcircuits.circuit.subcircuits import top_circuit
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import circuit_graph, faithfulness_curve

__all__: list[str] = []


@dataclass(frozen=True)
class CircuitSection(Section):
    """The circuit of ``operation`` (empty: the run's one circuit); with a faithfulness curve, the graph shows the
    plateau circuit, the smallest that reaches the plateau."""

    operation: str
    circuit: Circuit
    faithfulness: Faithfulness | None = None

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return tuple(cls(op, circ, parts.circuit_faithfulness.get(op)) for op, circ in parts.circuit.items())

    @property
    def anchor(self) -> str:  # type: ignore[override]
        return f"circuit-{self.operation}" if self.operation else "circuit"

    @property
    def title(self) -> str:  # type: ignore[override]
        return f"Circuit{self._of}"

    @property
    def _of(self) -> str:
        return f" ({self.operation})" if self.operation else ""

    def figures(self) -> tuple[NamedFigure, ...]:
        faith, suffix = self.faithfulness, f"_{self.operation}" if self.operation else ""
        if faith is None or not faith.curve:
            return (NamedFigure(f"circuit{suffix}", circuit_graph(self.circuit, faith), saved=False),)
        shown = top_circuit(self.circuit, faith.plateau_size)
        return (
            NamedFigure(f"circuit_curve{suffix}", faithfulness_curve(faith), saved=False),
            NamedFigure(f"circuit{suffix}", circuit_graph(shown, faith), saved=False),
        )

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        circ, faith = self.circuit, self.faithfulness
        self.start(page)
        rounds = circ.settings.rounds
        text = (
            f"Sender → receiver path patching from the logits ({circ.method}, metric {circ.metric}, {circ.n_pairs} "
            f"discovery pairs): {len(circ.nodes) - 1} nodes, {len(circ.edges)} edges after {max(0, len(rounds) - 1)} "
            f"rounds ({circ.settings.stopped or '?'}). Edge intervals are {circ.confidence:.0%} bootstrap "
            "intervals over pairs; dashed edges enter a key/value."
        )
        if faith is not None:
            text += (
                " Faithfulness F = (m(C) − m(cf)) / (m(M) − m(cf)) on other pairs, m the whole answer's "
                "log-probability, nodes outside the circuit ablated at the query positions: " + faith.summary() + "."
            )
        page.reading(text)
        for f in figures:
            page.figure(f.figure)
        df = circ.to_dataframe().sort_values("effect", key=abs, ascending=False).head(30)
        page.table(f"Circuit edges{self._of}", table(df))
        if faith is not None and faith.curve:
            page.table(f"Faithfulness curve{self._of}", table(faith.curve_frame()))
