"""The forward mechanics every method shares: they take a :class:`~mathcircuits.models.HookedModel` and run it.

Layers, top down: :mod:`.capture` (one forward, activations at the last position), :mod:`.changes` (a block's
attention and MLP contributions), :mod:`.readout` (final norm, unembedding, soft cap, in float32) and
:mod:`.suffix` (a prompt's tail rerun from a block on); :mod:`.prefix` (the shared few-shot prefix run once);
:mod:`.integrity` (each fast path checked against its plain path on the user's model) and :mod:`.placement`
(where each block of a split or offloaded model runs); :mod:`.verdicts` (the checks' passes saved on disk, so
a later process on the same model and versions does not re-run them).
"""

from mathcircuits.models.forward.integrity import IntegrityError, fast_paths
from mathcircuits.models.forward.placement import check_trainable_placement
from mathcircuits.models.forward.prefix import HFForward, PrefixRunner, run_from_layer
from mathcircuits.models.forward.readout import Readout

__all__ = [
    "fast_paths",
    "HFForward",
    "IntegrityError",
    "PrefixRunner",
    "Readout",
    "check_trainable_placement",
    "run_from_layer",
]
