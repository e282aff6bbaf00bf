"""How numbers are represented and combined: Fourier spectra, mod-T and digit probes, the helix, heuristic neurons.

Each analysis reads numbers at their last token (:mod:`.reading` says why) and reports every statistic against a
null with an interval: spectra along the number axis (Zhou et al. 2024) against shuffled order and the tokenizer
baseline (Fu et al. 2026); ``n mod T`` probes (Cohen's κ) and circular digit probes (Levy & Geva 2025) against
depth 0 and a control task; the generalised helix (Kantamneni & Tegmark 2025) against equal-dimension PCA and
random subspaces, and its causal patch; heuristic neurons over an operand grid (Nikankin et al. 2025).

The stage ``mathcircuits numbers`` (:class:`NumbersConfig`) runs them all; docs/numbers.md explains the methods
and docs/claims.md the claims N1–N3.
"""

from mathcircuits._checks import check_exports
from mathcircuits.numbers.ablation import LayerTopK, NeuronKnockout
from mathcircuits.numbers.collected import NumberResults
from mathcircuits.numbers.components import logit_spectra
from mathcircuits.numbers.config import NumbersConfig
from mathcircuits.numbers.grid import GridCapture, capture_grid, operand_grid
from mathcircuits.numbers.helix import HelixResult, fit_helix
from mathcircuits.numbers.neurons import NeuronResult, heuristic_neurons
from mathcircuits.numbers.patch import HelixPatchResult, helix_patch
from mathcircuits.numbers.probes import BestDepth, ProbeResult, mod_probes
from mathcircuits.numbers.results import TooFewCorrect
from mathcircuits.numbers.spectra import Spectrum, number_spectra
from mathcircuits.numbers.states import NumberStates, number_contexts, number_states

__all__ = [
    "BestDepth",
    "GridCapture",
    "HelixPatchResult",
    "HelixResult",
    "LayerTopK",
    "NeuronKnockout",
    "NeuronResult",
    "NumberResults",
    "NumberStates",
    "NumbersConfig",
    "ProbeResult",
    "Spectrum",
    "TooFewCorrect",
    "capture_grid",
    "fit_helix",
    "helix_patch",
    "heuristic_neurons",
    "logit_spectra",
    "mod_probes",
    "number_contexts",
    "number_spectra",
    "number_states",
    "operand_grid",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
