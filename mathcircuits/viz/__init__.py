"""Figures (Plotly) and interactive views (CircuitsVis) of the results.

Every function takes result values (never a model) and returns a figure or an HTML object;
:mod:`mathcircuits.viz.export` writes them to HTML / PNG / SVG / PDF. The report that puts
them on one page is :mod:`mathcircuits.report`.
"""

from mathcircuits._checks import check_exports
from mathcircuits.viz.attention import attention_excess, attention_role_distributions, attention_role_means
from mathcircuits.viz.circuit_graph import circuit_graph
from mathcircuits.viz.circuitsvis import OfflineHTML, attention_heads_view
from mathcircuits.viz.export import ChromiumMissingError, save_figure, save_figures, screenshot_html
from mathcircuits.viz.faithfulness_curve import faithfulness_curve
from mathcircuits.viz.heatmap import patching_heatmap, patching_heatmaps, patching_top_heads
from mathcircuits.viz.improve import accuracy_before_after, pareto_plot, sft_loss_curves
from mathcircuits.viz.knockout import knockout_curves
from mathcircuits.viz.numbers import (
    grid_heatmaps,
    helix_patch_bars,
    helix_planes,
    neuron_topk_curves,
    probe_curves,
    spectrum_lines,
)
from mathcircuits.viz.probes import probe_case_trajectory, probe_similarity_curves
from mathcircuits.viz.sft_compare import sft_delta_bars, sft_sweep_curves
from mathcircuits.viz.stability import selection_stability_bars
from mathcircuits.viz.transfer import transfer_bars

__all__ = [
    "ChromiumMissingError",
    "OfflineHTML",
    "accuracy_before_after",
    "attention_excess",
    "attention_heads_view",
    "attention_role_distributions",
    "attention_role_means",
    "circuit_graph",
    "faithfulness_curve",
    "grid_heatmaps",
    "helix_patch_bars",
    "helix_planes",
    "knockout_curves",
    "neuron_topk_curves",
    "pareto_plot",
    "patching_heatmap",
    "patching_heatmaps",
    "patching_top_heads",
    "probe_case_trajectory",
    "probe_curves",
    "probe_similarity_curves",
    "save_figure",
    "save_figures",
    "screenshot_html",
    "selection_stability_bars",
    "sft_delta_bars",
    "sft_loss_curves",
    "sft_sweep_curves",
    "spectrum_lines",
    "transfer_bars",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
