"""docs/api.md, generated from the code by scripts/gen_api_docs.py, documents exactly the public names.

The public names are the ``__all__`` of the package and of each public subpackage (and of the public
modules ``cli`` and ``power``). The page has one section per such module, an entry for every name in
its ``__all__`` and no entry for any other name; every name in any ``__all__`` below the package
(a submodule's lists only public names) has an entry somewhere."""

import importlib
import pkgutil
import re
from pathlib import Path

import mathcircuits

from helpers import script_module

ROOT = Path(__file__).resolve().parents[1]
_SECTION = re.compile(r"^## `([\w.]+)`$", re.MULTILINE)
_ENTRY = re.compile(r"^(?:### `(\w+)`|\| `(\w+)` \|)", re.MULTILINE)


def _generator():
    return script_module("gen_api_docs")


def documented(text: str) -> dict[str, set[str]]:
    """Module → the names the page has an entry for (a ``###`` heading or a row of its constants table)."""
    heads = list(_SECTION.finditer(text))
    out: dict[str, set[str]] = {}
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        out[head.group(1)] = {a or b for a, b in _ENTRY.findall(text[head.end() : end])}
    return out


def test_documented_finds_entries():
    page = "## `m`\n\n| constant | value |\n|---|---|\n| `K` | `1` |\n\n### `f`\n\n### `C` (class)\n\n"
    page += "## `n`\n\n### `g`\n"
    assert documented(page) == {"m": {"K", "f", "C"}, "n": {"g"}}


def test_api_md_documents_exactly_the_public_names():
    gen = _generator()
    page = documented((ROOT / "docs" / "api.md").read_text())
    public = {m: set(importlib.import_module(m).__all__) for m in gen.public_modules()}
    assert list(page) == gen.public_modules(), "one section per public module, in pipeline order"
    missing = {m: sorted(public[m] - page[m]) for m in public if public[m] - page[m]}
    extra = {m: sorted(page[m] - public[m]) for m in public if page[m] - public[m]}
    fix = "Fix: run `python scripts/gen_api_docs.py` and commit docs/api.md."
    assert not missing, f"public names without an entry in docs/api.md: {missing}. {fix}"
    assert not extra, f"docs/api.md has entries for names that are not public: {extra}. {fix}"


def test_every_all_name_has_an_entry():
    on_page = set().union(*documented((ROOT / "docs" / "api.md").read_text()).values())
    for info in pkgutil.walk_packages(mathcircuits.__path__, "mathcircuits."):
        names = getattr(importlib.import_module(info.name), "__all__", ())
        assert not set(names) - on_page, (info.name, sorted(set(names) - on_page))


def test_signatures_are_shown_as_written():
    text = (ROOT / "docs" / "api.md").read_text()
    # signatures show types and defaults as written, without memory addresses
    assert " at 0x" not in text
    assert "correct_pairs(\n    model: HookedModel,\n    operation: Operation = 'add'," in text
    assert "path_patch(\n    model: HookedModel,\n    pairs: PairSet," in text
