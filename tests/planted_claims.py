"""Tiny Llamas with a planted copy circuit whose shape we choose: the known answers the claims' rules must read.

The task is :mod:`mathcircuits.circuit.planted`'s (copy the prompt's one digit, ``"a6hxd="`` → ``6``; prompts from
:func:`~mathcircuits.circuit.copy_pairs`), and so is the mechanism: a *mover* head at the marker ``x`` attends to
the digit and writes its identity into residual dims 40-49; one or more *reader* heads at the last token attend
to the marker and copy 40-49 out. Here we choose

* where the readers sit (``readers``): in the middle of a deep model, or in its last layer;
* where the readers write: straight into the answer dims 20-29 that the unembedding reads, or (``mlp_writer``)
  into dims 50-59, which the MLP of that layer turns into the answer (so the MLPs write the answer *because*
  of the readers);
* or no circuit at all but **diffuse** copying (``diffuse=True``): every head of every layer attends from the last
  token to the digit and writes a 1/n share of the answer.

Every other head and MLP writes only noise dims 30-39, which the unembedding ignores.
"""

from __future__ import annotations

from collections.abc import Sequence

from mathcircuits.circuit import MOVER, plant_copy
from mathcircuits.models import HookedModel, from_hf, tiny_llama

__all__ = ["MOVER", "planted_model"]


def planted_model(
    n_layers: int = 3,
    readers: Sequence[tuple[int, int]] = ((2, 2),),
    mlp_writer: bool = False,
    diffuse: bool = False,
    n_heads: int = 4,
) -> HookedModel:
    """A tiny Llama (``n_heads`` heads in ``n_heads / 2`` KV groups per layer, d_head 16: d_model 64 for 4 heads)
    with the chosen plant (:func:`mathcircuits.circuit.plant_copy`). 8 heads leave enough depth-matched random sets
    (49 for a key set in two layers) for a p-value below 0.05; 4 heads leave 9."""
    hf, tok = tiny_llama(seed=0, n_layers=n_layers, d_model=16 * n_heads, n_heads=n_heads, n_kv_heads=n_heads // 2)
    model = from_hf(hf, tok, name=f"planted-{n_layers}" + (f"x{n_heads}" if n_heads != 4 else ""))
    plant_copy(model, readers, mlp_writer, diffuse)
    return model
