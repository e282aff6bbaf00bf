"""Print what the circuit stage measured, per operation, as Markdown: the numbers a resolve note quotes.

For each ``circuit/circuit_<op>.json`` and ``faithfulness_<op>.json`` of a run folder: how discovery went
(rounds, faithfulness on the discovery pairs, why it stopped), the denominator, the faithfulness curve
(every evaluation with its interval, and the random band), the plateau circuit's nodes with their roles and
its strongest edges, and necessity, completeness and minimality per ablation.

    python scripts/circuit_summary.py runs/circuit
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from mathcircuits.circuit import Circuit, Faithfulness
from mathcircuits.circuit.subcircuits import top_circuit


def _iv(iv) -> str:
    return "n/a" if math.isnan(iv.value) else f"{iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def summarise(circuit: Circuit, faith: Faithfulness, op: str) -> list[str]:
    """The Markdown lines of one operation."""
    s = circuit.settings
    out = [f"### {op}", ""]
    rounds = ", ".join(f"round {r.round}: {r.nodes} nodes, F={r.faithfulness:.3f}" for r in s.rounds)
    out.append(
        f"Discovery on {circuit.n_pairs} pairs ({', '.join(circuit.data.templates)}), metric "
        f"{circuit.metric}, positions {s.positions}, screen {s.screen}: {rounds}; stopped: "
        f"{s.stopped}; {circuit.seconds:.0f} s."
    )
    out.append(
        f"Evaluation on {faith.n_pairs} other pairs ({len(faith.templates)} templates, intervals over "
        f"{faith.interval_over}), {faith.seconds:.0f} s. m(M) = {faith.clean:.3f}, m(cf) = {faith.counterfactual:.3f} "
        f"nats; denominator m(M) − m(cf) = {_iv(faith.denominator)} nats."
    )
    if faith.ill_conditioned:
        return [*out, f"**ill-conditioned** ({faith.rule}): no ratio.", ""]
    keys = list(faith.curve[0].faithfulness)
    out += ["", "| edges | nodes | " + " | ".join(keys) + f" | random ({faith.primary}) mean [95% of draws] |",
            "|---|---|" + "---|" * (len(keys) + 1)]  # fmt: skip
    for p in faith.curve:
        mean, lo, hi = p.band(faith.confidence)
        rand = f"{mean:.3f} [{lo:.3f}, {hi:.3f}]" if p.random else "—"
        out.append(f"| {p.size} | {p.n_nodes} | " + " | ".join(_iv(p.faithfulness[k]) for k in keys) + f" | {rand} |")
    plateau = faith.plateau
    assert plateau is not None
    roles = {n.name: n.role for n in circuit.nodes}
    small = top_circuit(circuit, faith.plateau_size)
    out += ["", f"Plateau circuit: {faith.plateau_size} edges, {plateau.n_nodes} nodes "
            f"(the smallest within {faith.settings.plateau_tol} of the curve's maximum, {faith.primary}); "
            f"F = {_iv(plateau.faithfulness[faith.primary])}.", "", "Nodes: " + "; ".join(
                f"{n} ({roles.get(n, '?')})" for n in faith.plateau_nodes)]  # fmt: skip
    out.append(
        "Strongest edges: "
        + "; ".join(
            f"{e.sender} → {e.receiver} ({e.via}) {e.effect:+.3f} [{e.low:+.3f}, {e.high:+.3f}]"
            for e in small.strongest_edges(8)
        )  # fmt: skip
    )
    for a, iv in faith.necessity.items():
        rows = [r for r in faith.completeness if r.ablation == a]
        worst = max(rows, key=lambda r: abs(r.difference.value), default=None)
        mini = faith.minimality.get(a, {})
        top = sorted(mini.items(), key=lambda kv: -kv[1].value)[:3]
        neg = sum(v.high < 0 for v in mini.values())
        out.append(
            f"- {a}: necessity F(M∖C) = {_iv(iv)}; completeness: largest |F(C∖K) − F(M∖K)| over {len(rows)} sets = "
            + (f"{_iv(worst.difference)} (K = {len(worst.removed)} nodes)" if worst else "n/a")
            + f"; minimality: {sum(v.low > 0 for v in mini.values())} of {len(mini)} nodes lose F when removed "
            f"(interval above 0), {neg} gain; largest: " + ", ".join(f"{k} {_iv(v)}" for k, v in top)
        )
    return [*out, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder with a finished (or partly finished) circuit stage")
    args = ap.parse_args()
    folder = args.run / "circuit"
    for path in sorted(folder.glob("circuit_*.json")):
        op = path.stem.removeprefix("circuit_")
        faith_path = folder / f"faithfulness_{op}.json"
        if faith_path.exists():
            print("\n".join(summarise(Circuit.load(path), Faithfulness.load(faith_path), op)))


if __name__ == "__main__":
    main()
