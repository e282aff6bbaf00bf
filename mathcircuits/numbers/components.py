"""Zhou et al.'s view: what each key head and MLP writes to the candidate answers' logits, along the number axis.

Zhou et al. (2024) project each MLP's and attention layer's output through the unembedding onto the number tokens
and find Fourier components of periods 2, 2.5, 5 and 10. Here the projection is a component's exact *direct
effect* at the prompt's last position, through the model's own final norm
(:meth:`~mathcircuits.numbers.grid.GridCapture.direct_effect`), for every prompt of an operand grid. The spectrum,
its interval (resampling prompts) and its shuffled-order null are those of
:func:`~mathcircuits.numbers.spectra.spectrum`.

Reference: Zhou et al., "Pre-trained Large Language Models Use Fourier Features to Compute Addition"
(NeurIPS 2024), §3.
"""

from __future__ import annotations

from mathcircuits._errors import FixableValueError
from mathcircuits.models import HookedModel
from mathcircuits.numbers.grid import GridCapture, answer_first_token
from mathcircuits.numbers.spectra import Spectrum, spectrum
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY

__all__ = ["logit_spectra"]


def logit_spectra(
    model: HookedModel,
    capture: GridCapture,
    n_shuffles: int = 200,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Spectrum:
    """Zhou et al.'s spectrum: what each captured head or MLP writes to the candidate answers' logits, per prompt.

    The candidates are the first answer tokens of the numbers ``0, 1, …``: every number up to the grid's largest
    answer when each is one token, else the ten digits (a digit-split tokenizer's first answer tokens). The columns
    resampled are the prompts; ``uncertainty``'s seed also draws the shuffles. One row per component.
    """
    if not capture.components:
        raise FixableValueError("the capture has no heads or MLPs. ", "capture_grid(..., heads=..., mlps=...).")
    top = int(capture.result.max())
    tokens = [answer_first_token(model.tokenizer, n) for n in range(max(top, 9) + 1)]
    single = len(set(tokens)) == len(tokens)
    if not single:
        tokens = tokens[:10]
    effect = capture.direct_effect(model, tokens)  # [prompt, component, candidate]
    what = f"numbers 0–{len(tokens) - 1}" if single else "the digits 0–9 (first answer tokens)"
    return spectrum(
        [effect[:, c].T for c in range(effect.shape[1])],
        list(capture.components),
        source="direct effect on the candidate answers' logits at the last position",
        axis=f"candidate answers: {what}",
        reading="the component's output at the prompt's last position, through the final norm and unembedding",
        baseline="none (the candidates are tokens, not a model's numbers)",
        n_shuffles=n_shuffles,
        uncertainty=uncertainty,
    )
