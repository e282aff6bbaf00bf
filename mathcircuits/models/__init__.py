"""Stage 2 — models: load any supported model as a TransformerLens hooked model."""

from mathcircuits.models import hooks
from mathcircuits.models.embedded import (
    EMBEDDED,
    EMBEDDED_NAME,
    EmbeddedSource,
    convert_gguf,
    embedded_model_dir,
    embedded_source,
    find_embedded_gguf,
)
from mathcircuits.models.loading import HookedModel, ModelSpec, load_hf_model, load_model, resolve_source
from mathcircuits.models.spec import ModelMismatchError, as_spec, check_model, heads_by_layer
from mathcircuits.models.tiny import TINY_FAMILIES, tiny_gpt2, tiny_llama, tiny_model, tiny_tokenizer
from mathcircuits.models.wrap import from_bridge, from_hf, wrap

__all__ = [
    "EMBEDDED",
    "EMBEDDED_NAME",
    "EmbeddedSource",
    "TINY_FAMILIES",
    "HookedModel",
    "ModelMismatchError",
    "ModelSpec",
    "as_spec",
    "check_model",
    "convert_gguf",
    "from_bridge",
    "from_hf",
    "embedded_model_dir",
    "embedded_source",
    "find_embedded_gguf",
    "heads_by_layer",
    "hooks",
    "load_hf_model",
    "load_model",
    "resolve_source",
    "tiny_gpt2",
    "tiny_llama",
    "tiny_model",
    "tiny_tokenizer",
    "wrap",
]
