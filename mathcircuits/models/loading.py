"""Load any supported model as a TransformerLens hooked model.

TransformerLens 4 replaced ``HookedTransformer`` with ``TransformerBridge``, which wraps an HF model in place. We
boot the bridge with the HF model *and* tokenizer (so nothing is fetched), then call
``enable_compatibility_mode(no_processing=True)``: HookedTransformer hook names without folding norms or
centring the unembedding. Weight processing would shift raw logits (by up to ~16 on SmolLM2) and rewrite the HF
weights in place, which breaks the paper's metric (relative change of the raw correct-answer logit) and any later
fine-tuning. See docs/concepts.md.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from pathlib import Path

import torch
from huggingface_hub import try_to_load_from_cache
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from mathcircuits._errors import FixableFileNotFoundError, FixableKeyError, FixableValueError
from mathcircuits._progress import progress_bar
from mathcircuits.models.compat import check_versions, install_cache_alias
from mathcircuits.models.embedded import EMBEDDED, cache_root, convert_gguf, embedded_model_dir, embedded_source
from mathcircuits.models.forward.integrity import instrument_hooks
from mathcircuits.models.forward.prefix import PrefixRunner
from mathcircuits.models.hooked import HookedModel
from mathcircuits.models.spec import ModelSpec
from mathcircuits.models.tiny import TINY_FAMILIES, tiny_family_name, tiny_gpt2, tiny_llama, tiny_model

__all__ = [
    "HookedModel",
    "load_hf_model",
    "load_model",
    "resolve_source",
]

log = logging.getLogger(__name__)

_TINY = {"tiny-llama": tiny_llama, "tiny-gpt2": tiny_gpt2}


#: Set to 1 to let a name that is nothing local go to the Hugging Face Hub (as ``hub:<id>`` does for one name).
HUB_ENV = "MATHCIRCUITS_HUB"
HUB_PREFIX = "hub:"


def available_sources() -> list[str]:
    """The model names that load offline without a path: the embedded models and the tiny ones."""
    tiny = sorted({"tiny-llama", "tiny-gpt2", *("tiny-" + f.replace("_", "-") for f in TINY_FAMILIES)})
    return [*EMBEDDED, *tiny]


def _hub_cache_folder(repo_id: str) -> Path | None:
    """The local snapshot folder of a Hub id's model in the Hugging Face cache (its config.json's), or ``None``.

    Read from the cache's files alone; loading from this folder asks the Hub nothing (given the id, transformers
    still asks the Hub for optional files such as an adapter config, retrying for seconds when it is unreachable).
    """
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - an id the Hub would not accept (spaces, three parts, ...): not cached
        return None
    return Path(found).parent if isinstance(found, str) else None


def resolve_source(source: str) -> tuple[str, str]:
    """``(kind, location)``: kind is embedded | tiny | folder | gguf | cached | hub; location the canonical one.

    ``source``: an embedded model (:data:`EMBEDDED`), ``"tiny-<family>"`` (:data:`TINY_FAMILIES`), a local HF
    folder or ``.gguf`` file, a Hub id already in the local Hugging Face cache (``cached``: loaded offline), or
    ``"hub:<id>"`` to load from the Hub (any unknown name goes to the Hub when ``$MATHCIRCUITS_HUB=1``). Offline
    first: a name that is none of these is a ``KeyError`` at once, listing the names that load offline, never a
    request to an unreachable Hub. A local path that does not exist or holds no model is a ``FileNotFoundError``; a
    tiny family without a tiny model a ``KeyError``.
    """
    if source.startswith(HUB_PREFIX):
        repo_id = source[len(HUB_PREFIX) :].strip()
        if not repo_id:
            raise FixableKeyError(
                f"{source!r} names no Hub id. ", "write hub:<owner>/<name>, e.g. hub:Qwen/Qwen2.5-0.5B."
            )
        return "hub", repo_id
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
            raise FixableFileNotFoundError(
                f"GGUF file {source!r} does not exist. ", "give the path to an existing .gguf file."
            )
        return "gguf", str(path.resolve())
    if path.exists():
        if not (path / "config.json").exists():
            raise FixableFileNotFoundError(
                f"{source!r} is a folder without config.json, so it is not an HF model folder. ",
                "point to a folder written by save_pretrained, or to a .gguf file.",
            )
        return "folder", str(path.resolve())
    if source.startswith((".", "/", "~")):
        raise FixableFileNotFoundError(
            f"Model path {source!r} does not exist. ",
            f"give an existing HF folder (with config.json) or .gguf "
            f"file, an embedded model ({', '.join(EMBEDDED)}), a 'tiny-<family>' name, or a Hub id.",
        )
    if _hub_cache_folder(source) is not None:
        return "cached", source
    if os.environ.get(HUB_ENV, "") == "1":
        return "hub", source
    raise FixableKeyError(
        f"model {source!r} is not an embedded model, a tiny model, a local folder or .gguf file, or a Hub id in the "
        f"local cache; the models that load offline are {', '.join(available_sources())}. ",
        f"use one of those, a path, or hub:{source} to download it from the Hugging Face Hub "
        f"(or set {HUB_ENV}=1 to let any unknown name go to the Hub).",
    )


def load_hf_model(
    source: str = "embedded",
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    device_map: str | dict[str, int | str | torch.device] | None = None,
    offload_folder: str | Path | None = None,
):
    """Load a *plain* HF causal LM and its tokenizer (no bridge), e.g. for fine-tuning: ``(model, tokenizer)``.

    The model is in eval mode with eager attention. ``device`` is ignored when ``device_map`` is given (passed to
    ``from_pretrained``: accelerate places the layers, ``offload_folder`` takes those put on ``"disk"``); a
    ``device_map`` needs a source loaded from files, not a tiny model built in memory.
    """
    kind, loc = resolve_source(source)
    if device_map is not None and kind == "tiny":
        raise FixableValueError(
            f"device_map={device_map!r} needs a model loaded from files, but {source!r} is built in memory. ",
            "pass device= instead, or save_pretrained the model and load the folder with device_map.",
        )
    if kind == "tiny":
        model, tok = _TINY[loc](seed=seed) if loc in _TINY else tiny_model(loc[len("tiny-") :], seed=seed)
    else:
        if kind == "embedded":
            folder: str = str(embedded_model_dir(loc))
        elif kind == "gguf":
            folder = str(_gguf_cache_dir(Path(loc)))
        elif kind == "cached":  # its snapshot folder, so that the Hub is not asked
            folder = str(_hub_cache_folder(loc))
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
            if kind == "cached":
                raise OSError(
                    f"{loc!r} is in the Hugging Face cache, but not whole ({err}). "
                    f"Fix: download it again with source hub:{loc}, or pass a local HF folder."
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
    device_map: str | dict[str, int | str | torch.device] | None = None,
    offload_folder: str | Path | None = None,
    progress: bool | None = None,
) -> HookedModel:
    """Load ``source`` (:func:`resolve_source`) as a hooked model (TransformerBridge, no weight processing).

    ``device_map`` (with ``offload_folder``) goes to HF ``from_pretrained``: ``"auto"`` splits a model that does not
    fit one device over several GPUs, offloading the rest to CPU memory or disk; every stage runs on such a model
    (docs/howto/big-models-on-gpu.md). ``device`` is then ignored. ``progress``: a bar on stderr with the two
    phases, reading the weights and wrapping them (None: on unless ``MATHCIRCUITS_PROGRESS=0``).
    """
    with progress_bar(progress, f"loading {source}: reading the weights", total=2, leave=False) as bar:
        hf_model, tok = load_hf_model(
            source, dtype=dtype, device=device, seed=seed, device_map=device_map, offload_folder=offload_folder
        )
        bar.set_description(f"loading {source}: wrapping it in a TransformerBridge")
        bar.update(1)
        kind, loc = resolve_source(source)
        name = loc
        embedded = embedded_source(loc) if kind == "embedded" else None
        bridge_name = (embedded.official_id if embedded is not None else None) or name
        bridge = boot_bridge(hf_model, tok, bridge_name, device=None if device_map is not None else device)
        bar.update(1)
    return HookedModel(
        bridge=bridge, tokenizer=tok, spec=spec_from_bridge(bridge, name, source), prefix_runner=PrefixRunner
    )


def boot_bridge(
    hf_model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    name: str,
    device: str | torch.device | None = None,
) -> TransformerBridge:
    """Wrap ``hf_model`` in place in a TransformerBridge with HookedTransformer hook names and raw weights.

    Passing the tokenizer keeps the boot offline; ``device=None`` leaves the model where it is (e.g. spread by a
    ``device_map``).

    Raises:
        UnsupportedVersionError: transformers / TransformerLens / torch / peft outside the tested ranges.
    """
    check_versions()
    with contextlib.redirect_stdout(io.StringIO()):
        bridge = TransformerBridge.boot_transformers(name, hf_model=hf_model, tokenizer=tokenizer, device=device)
        bridge.enable_compatibility_mode(no_processing=True)
    return instrument_hooks(install_cache_alias(bridge)).eval()


def spec_from_bridge(bridge: TransformerBridge, name: str, source: str) -> ModelSpec:
    """The :class:`ModelSpec` of a booted bridge (shape facts from its config and the wrapped HF model's)."""
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
