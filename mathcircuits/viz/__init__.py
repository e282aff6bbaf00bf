"""Stage 4 — figures (Plotly), interactive views (CircuitsVis) and the HTML report.

Every function takes result values (never a model) and returns a figure or an
HTML object; :mod:`mathcircuits.viz.export` writes them to HTML / PNG / SVG / PDF.
"""

from mathcircuits.viz.attention import attention_excess, attention_role_distributions, attention_role_means
from mathcircuits.viz.circuit_graph import circuit_graph
from mathcircuits.viz.circuits import OfflineHTML, attention_heads_view
from mathcircuits.viz.export import (
    ChromiumMissingError,
    find_chromium,
    require_chromium,
    save_figure,
    save_figures,
    screenshot_html,
)
from mathcircuits.viz.faithfulness_curve import faithfulness_curve
from mathcircuits.viz.heatmap import patching_heatmap, patching_heatmaps, patching_top_heads
from mathcircuits.viz.knockout import knockout_curves
from mathcircuits.viz.probes import probe_case_trajectory, probe_similarity_curves
from mathcircuits.viz.report import build_report, plain_text, report_html
from mathcircuits.viz.stability import selection_stability_bars
from mathcircuits.viz.transfer import transfer_bars

__all__ = [
    "circuit_graph",
    "faithfulness_curve",
    "ChromiumMissingError",
    "OfflineHTML",
    "attention_excess",
    "attention_heads_view",
    "attention_role_distributions",
    "attention_role_means",
    "build_report",
    "find_chromium",
    "knockout_curves",
    "patching_heatmap",
    "patching_heatmaps",
    "patching_top_heads",
    "plain_text",
    "probe_case_trajectory",
    "probe_similarity_curves",
    "report_html",
    "require_chromium",
    "save_figure",
    "save_figures",
    "screenshot_html",
    "selection_stability_bars",
    "transfer_bars",
]
