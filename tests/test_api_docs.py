"""docs/api.md is generated from the code by scripts/gen_api_docs.py and must match it."""

import importlib
import re
from pathlib import Path

from helpers import script_module

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    return script_module("gen_api_docs")


def test_api_md_is_up_to_date():
    text = _generator().render()
    assert (ROOT / "docs" / "api.md").read_text() == text, (
        "docs/api.md differs from the code. Fix: run `python scripts/gen_api_docs.py` and commit docs/api.md."
    )


def test_every_public_name_has_an_entry():
    gen = _generator()
    text = gen.render()
    for modname in gen.public_modules():
        section = text.split(f"## `{modname}`\n", 1)[1].split("\n## `", 1)[0]
        for name in importlib.import_module(modname).__all__:
            assert re.search(rf"^(### `{re.escape(name)}`|\| `{re.escape(name)}` \|)", section, re.MULTILINE), (
                modname,
                name,
            )
    # signatures show types and defaults as written, without memory addresses
    assert " at 0x" not in text
    assert "correct_pairs(\n    model: HookedModel,\n    operation: Operation = 'add'," in text
