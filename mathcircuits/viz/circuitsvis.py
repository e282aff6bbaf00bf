"""Interactive CircuitsVis attention views of key heads that work offline.

``circuitsvis.attention.attention_heads`` returns a ``RenderedHTML`` with ``cdn_src`` (what ``str()``
gives), which imports the JavaScript from unpkg.com and shows a blank page offline, and ``local_src``, which
inlines the whole bundle (~1.3 MB); its ``_repr_html_`` even probes the network to choose. We always use
``local_src``. For pages with several views (the report), :func:`split_bundle` removes the inlined bundle
from each view so the page loads it once, in a classic ``<script>`` that defines the global
``CircuitsVis`` before the views' module scripts run.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from mathcircuits._errors import FixableFileNotFoundError, FixableIndexError, FixableValueError
from mathcircuits._files import atomic_path
from mathcircuits.analysis import HeadPatterns

__all__ = [
    "OfflineHTML",
    "attention_heads_view",
]


def circuitsvis_bundle() -> str:
    """The CircuitsVis JavaScript bundle exactly as ``render_local`` inlines it.

    FileNotFoundError when the installed circuitsvis lacks its ``dist/cdn/iife.js``.
    """
    import circuitsvis

    path = Path(circuitsvis.__file__).parent / "dist" / "cdn" / "iife.js"
    if not path.exists():
        raise FixableFileNotFoundError(
            f"{path} is missing, so CircuitsVis cannot render offline. ", "pip install --force-reinstall circuitsvis."
        )
    return path.read_text(encoding="utf-8").replace("</script>", "")


def split_bundle(fragment: str) -> tuple[str, bool]:
    """Remove the inlined bundle from a ``local_src`` fragment; returns (fragment, whether it was removed)."""
    bundle = circuitsvis_bundle()
    if bundle in fragment:
        return fragment.replace(bundle, ""), True
    return fragment, False


@dataclass(frozen=True)
class OfflineHTML:
    """An HTML fragment with its JavaScript inlined: renders in Jupyter and saves as a standalone page."""

    fragment: str = field(repr=False)  # ~1 MB of inlined JS; keep it out of the text repr
    title: str = "mathcircuits view"

    def _repr_html_(self) -> str:
        return self.fragment

    def page(self) -> str:
        return (
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f'<title>{html.escape(self.title)}</title></head>\n<body style="font-family: sans-serif">\n'
            f"<h2>{html.escape(self.title)}</h2>\n{self.fragment}\n</body></html>\n"
        )

    def save(self, path: str | os.PathLike) -> Path:
        with atomic_path(path) as tmp:
            tmp.write_text(self.page(), encoding="utf-8")
        return Path(path)


VIEW_PX_PER_TOKEN = 16  # a token's row and column in the zoomed pattern: the labels stay readable
VIEW_PX_PER_HEAD = 130  # a head's thumbnail in the selector row, its label ("L2.H1 → operand_b") whole
VIEW_MIN_PX, VIEW_MAX_PX = 520, 900  # below 520 the zoomed title runs into its badge


def view_width(n_tokens: int, n_heads: int) -> int:
    """The width (CSS px) an attention view needs: its square pattern at 16 px a token plus the axis labels, or
    its row of head thumbnails, whichever is wider, within 520-900 px.

    CircuitsVis draws the zoomed pattern as wide as its container, so without a bound a 17-token prompt fills
    ~900 px, mostly the grey of the masked upper triangle.
    """
    need = max(VIEW_PX_PER_TOKEN * n_tokens + 160, VIEW_PX_PER_HEAD * n_heads + 40)
    return int(min(VIEW_MAX_PX, max(VIEW_MIN_PX, need)))


def attention_heads_view(
    patterns: HeadPatterns, index: int = 0, heads: Sequence[tuple[int, int]] | None = None, *, title: str | None = None
) -> OfflineHTML:
    """CircuitsVis ``AttentionHeads`` view of the heads in ``patterns`` (a HeadPatterns) on prompt ``index``.

    Head names carry the head and, when known, the role of the token it attends to most from the last
    position. ``heads`` restricts the view (None: every recorded head; unrecorded ones are skipped, ValueError
    when none is left).
    """
    from circuitsvis.attention import attention_heads

    n = len(patterns.patterns)
    if not 0 <= index < n:
        raise FixableIndexError(
            f"prompt index {index} is out of range: these patterns hold {n} prompts. ", f"use 0..{n - 1}."
        )
    chosen = (
        list(range(len(patterns.heads)))
        if heads is None
        else [patterns.heads.index(tuple(h)) for h in heads if tuple(h) in patterns.heads]
    )
    if not chosen:
        raise FixableValueError(
            f"none of heads {heads} was recorded; these patterns hold {patterns.labels}. ",
            "record them with head_patterns().",
        )
    pat = patterns.patterns[index][chosen].float()
    roles = patterns.roles[index]
    names = [f"{patterns.labels[i]} → {roles[int(pat[row, -1].argmax())]}" for row, i in enumerate(chosen)]
    rendered = attention_heads(
        attention=pat, tokens=list(patterns.tokens[index]), attention_head_names=names, mask_upper_tri=True
    )
    # CircuitsVis writes its target as <div .../>, which HTML does not close: later content would land inside it and be
    # replaced when the view renders. Close it explicitly.
    fragment = re.sub(r'(<div id="circuits-vis-[^"]+"[^>]*?)\s*/>', r"\1></div>", rendered.local_src, count=1)
    width = view_width(len(patterns.tokens[index]), len(chosen))
    fragment = f'<div class="cv-view" style="max-width: {width}px">{fragment}</div>'
    prompt_tail = (
        patterns.prompts[index].splitlines()[-1] if patterns.prompts[index].strip() else patterns.prompts[index]
    )
    return OfflineHTML(
        fragment=fragment, title=title or f"Key-head attention on {prompt_tail!r} (pair {patterns.pair_ids[index]})"
    )
