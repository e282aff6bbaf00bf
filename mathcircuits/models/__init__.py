"""Stage 2 — models: load any supported model as a TransformerLens hooked model."""

from mathcircuits.models import hooks
from mathcircuits.models.compat import UnsupportedVersionError, check_versions
from mathcircuits.models.embedded import (
    EMBEDDED,
    EMBEDDED_NAME,
    EmbeddedSource,
    convert_gguf,
    embedded_model_dir,
    embedded_source,
    find_embedded_gguf,
)
from mathcircuits.models.integrity import IntegrityError, checks_run, fast_paths, fast_paths_enabled
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
    "IntegrityError",
    "ModelMismatchError",
    "ModelSpec",
    "UnsupportedVersionError",
    "as_spec",
    "check_model",
    "check_versions",
    "checks_run",
    "convert_gguf",
    "fast_paths",
    "fast_paths_enabled",
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
