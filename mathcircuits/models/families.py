"""Block structure per model family, as data (like TransformerLens' architecture adapters).

Path patching's exact method, knockout and the MLP analyses need to know how a
family's transformer block turns its input residual ``x`` into its output:

* **sequential** (Llama, Mistral, Qwen 2/3, Gemma, Phi-3, GPT-2, OLMo,
  StarCoder2, GPT-NeoX with ``use_parallel_residual=False``)::

      mid = x + A(N1(x));   out = mid + M(N2(mid))

* **parallel** (Pythia / GPT-NeoX default, Phi-1/2, GPT-J): attention and MLP
  read the same input, so a head's change does not pass through its own
  layer's MLP, and there is no ``hook_resid_mid``::

      out = x + A(N1(x)) + M(N2(x))          (N2 = N1 for Phi and GPT-J)

* **sandwich / output norms** (Gemma 2/3: pre- and post-norms; OLMo 2:
  post-norms only, so the MLP reads the residual directly)::

      mid = x + P1(A(N1(x)));   out = mid + P2(M(N2(mid)))

  The bridge's ``hook_attn_out`` / ``hook_mlp_out`` are *after* ``P1`` / ``P2``;
  the pre-norm values are ``ln1_post.hook_in`` / ``ln2_post.hook_in``.

Gemma 2 also soft-caps the final logits: ``c · tanh(logits / c)``.

:data:`FAMILIES` maps an HF ``config.model_type`` to its :class:`BlockStructure`;
:func:`block_structure` resolves it for a loaded model (config flags such as
GPT-NeoX's ``use_parallel_residual`` included) and checks that the bridge has
the submodules the entry names. A family not in the table is refused with an
error that says what is unknown; the code never guesses a block shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mathcircuits._errors import FixableError
from mathcircuits._files import JSONValue
from mathcircuits.models.hooked import HookedModel

__all__ = [
    "BlockStructure",
    "UnsupportedFamilyError",
]


class UnsupportedFamilyError(FixableError, ValueError):
    """The model's family is not described in :data:`FAMILIES`, or a config flag takes it outside the entry."""


@dataclass(frozen=True)
class BlockStructure:
    """How one family's block computes, as the toolkit's methods need it.

    Args:
        family: the HF ``config.model_type``.
        parallel: attention and MLP read the same input (the block's ``resid_pre``).
        mlp_in_norm: bridge submodule that normalises the MLP's input (``None``: the MLP reads the residual).
        attn_out_norm: norm applied to the attention output before it joins the residual (``None``: none).
        mlp_out_norm: norm applied to the MLP output before it joins the residual (``None``: none).
        final_norm: bridge module of the final norm.
        logit_softcap: the final logits' soft cap ``c`` (``c · tanh(logits / c)``), ``None`` for none.
        parallel_config_key: HF config flag that sets ``parallel`` (GPT-NeoX), read when resolving.
        softcap_config_key: HF config key of the soft cap, read when resolving.
        requires: HF config values the entry assumes; another value is refused.
    """

    family: str
    parallel: bool = False
    mlp_in_norm: str | None = "ln2"
    attn_out_norm: str | None = None
    mlp_out_norm: str | None = None
    final_norm: str = "ln_final"
    logit_softcap: float | None = None
    parallel_config_key: str | None = None
    softcap_config_key: str | None = None
    requires: dict[str, JSONValue] = field(default_factory=dict)

    @property
    def mlp_reads(self) -> str:
        """Which residual hook the MLP's input is computed from: ``hook_resid_pre`` (parallel) or ``hook_resid_mid``."""
        return "hook_resid_pre" if self.parallel else "hook_resid_mid"

    @property
    def has_output_norms(self) -> bool:
        return self.attn_out_norm is not None or self.mlp_out_norm is not None

    def submodules(self) -> tuple[str, ...]:
        """Block submodules this structure relies on (checked against the bridge)."""
        names = ["attn", "mlp", self.mlp_in_norm, self.attn_out_norm, self.mlp_out_norm]
        return tuple(n for n in names if n is not None)


_SEQ = BlockStructure("")
_SANDWICH = replace(_SEQ, attn_out_norm="ln1_post", mlp_out_norm="ln2_post")

FAMILIES: dict[str, BlockStructure] = {
    "llama": replace(_SEQ, family="llama"),
    "mistral": replace(_SEQ, family="mistral"),
    "qwen2": replace(_SEQ, family="qwen2"),
    "qwen3": replace(_SEQ, family="qwen3"),
    "gemma": replace(_SEQ, family="gemma"),
    "gemma2": replace(_SANDWICH, family="gemma2", softcap_config_key="final_logit_softcapping"),
    "gemma3_text": replace(_SANDWICH, family="gemma3_text", softcap_config_key="final_logit_softcapping"),
    "phi3": replace(_SEQ, family="phi3"),
    "gpt2": replace(_SEQ, family="gpt2"),
    "gpt_neox": replace(_SEQ, family="gpt_neox", parallel=True, parallel_config_key="use_parallel_residual"),
    "olmo": replace(_SEQ, family="olmo"),
    "olmo2": replace(_SANDWICH, family="olmo2", mlp_in_norm=None),
    "stablelm": replace(_SEQ, family="stablelm", requires={"use_parallel_residual": False}),
    "starcoder2": replace(_SEQ, family="starcoder2"),
    "phi": replace(_SEQ, family="phi", parallel=True, mlp_in_norm="ln1"),
    "gptj": replace(_SEQ, family="gptj", parallel=True, mlp_in_norm="ln1"),
}


def block_structure(model: HookedModel) -> BlockStructure:
    """The resolved block structure of a loaded model (a :class:`~mathcircuits.models.HookedModel`).

    Args:
        model: the hooked model (its HF model's ``config.model_type`` names the family).

    Returns:
        The family's :class:`BlockStructure`, with ``parallel`` and ``logit_softcap`` read from the config.

    Raises:
        UnsupportedFamilyError: the family is not in :data:`FAMILIES`, a required config value differs,
            or the bridge lacks a submodule the entry names.
    """
    config = model.hf_model.config
    family = getattr(config, "model_type", None) or "?"
    arch = type(model.hf_model).__name__
    if family not in FAMILIES:
        raise UnsupportedFamilyError(
            f"model family {family!r} ({arch}) is not in mathcircuits.models.families.FAMILIES, so its block "
            "structure (sequential or parallel attention+MLP, output norms after attention/MLP, final logit soft cap) "
            "is unknown and the exact methods would have to guess it. ",
            f"add a BlockStructure entry for {family!r} and run tests/test_families.py on a tiny model of it, "
            f"or use a described family: {sorted(FAMILIES)}.",
        )
    entry = FAMILIES[family]
    for key, want in entry.requires.items():
        have = getattr(config, key, None)
        if have != want:
            raise UnsupportedFamilyError(
                f"{arch} has {key}={have!r}, but the {family!r} entry of FAMILIES describes only {key}={want!r}. ",
                f"add a BlockStructure for {family!r} with {key}={have!r} (and test it in tests/test_families.py).",
            )
    resolved = entry
    if entry.parallel_config_key is not None:
        resolved = replace(resolved, parallel=bool(getattr(config, entry.parallel_config_key, entry.parallel)))
    if entry.softcap_config_key is not None:
        cap = getattr(config, entry.softcap_config_key, None)
        resolved = replace(resolved, logit_softcap=float(cap) if cap else None)
    block0 = model.bridge.blocks[0]
    missing = [n for n in resolved.submodules() if not hasattr(block0, n)]
    if missing or not hasattr(model.bridge, resolved.final_norm):
        raise UnsupportedFamilyError(
            f"the bridge of {arch} lacks {missing or [resolved.final_norm]}, which the {family!r} entry of FAMILIES "
            "names. ",
            "correct the entry's submodule names to the bridge's (see bridge.blocks[0]).",
        )
    return resolved
