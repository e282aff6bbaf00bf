"""Write figures to HTML (opens offline) and to PNG / SVG / PDF, atomically.

Static images come from kaleido 1.x, which drives a Chromium-based browser through ``choreographer``,
searched in this order: ``$BROWSER_PATH``, a browser kaleido downloaded (``plotly_get_chrome``), then
``chrome``, ``chromium`` and the like on ``PATH`` and in their usual install folders. Each Chromium start
costs a few seconds, so :func:`save_figures` exports many figures in one batch. HTML files inline
plotly.js by default (~4.6 MB), so they open without a network.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Mapping

import plotly.graph_objects as go

from mathcircuits._errors import FixableError, FixableValueError
from mathcircuits._files import atomic_path

__all__ = [
    "ChromiumMissingError",
    "save_figure",
    "save_figures",
    "screenshot_html",
]

STATIC_FORMATS = ("png", "svg", "pdf", "jpeg", "webp")
_FORMATS = ("html",) + STATIC_FORMATS


class ChromiumMissingError(FixableError, RuntimeError):
    """Static export needs a Chromium-based browser and none was found."""


def find_chromium() -> str | None:
    """The browser kaleido would use, or None (same search as kaleido, plus ``PATH`` names as a fallback)."""
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env if Path(env).exists() else None
    with contextlib.suppress(Exception):  # choreographer is kaleido's dependency; absent without kaleido
        from choreographer.browsers.chromium import Chromium

        found = Chromium.find_browser(skip_local=False)
        if found:
            return str(found)
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def require_chromium() -> str:
    """Return the browser path or raise :class:`ChromiumMissingError` with the fix."""
    try:
        import kaleido  # noqa: F401
    except ImportError as err:
        raise ChromiumMissingError(
            "static figure export (PNG/SVG/PDF) needs kaleido >= 1.0, which is not installed. ",
            "pip install 'mathcircuits[export]' (or pip install kaleido), and install Chromium (see below), or "
            "export HTML instead.",
        ) from err
    path = find_chromium()
    if path is None:
        raise ChromiumMissingError(
            "static figure export (PNG/SVG/PDF) needs a Chromium-based browser for kaleido, and none was found "
            "($BROWSER_PATH unset; no chromium/chrome on PATH). ",
            "apt-get install -y chromium (Debian/Ubuntu), "
            "or set BROWSER_PATH=/path/to/chrome, or run plotly_get_chrome (downloads one; needs internet). "
            "HTML export works without it.",
        )
    return path


PLOTLY_WIDTH, PLOTLY_HEIGHT = 700, 500  # the size kaleido renders a figure that sets none at
TITLE_FONT = 17  # plotly's default title font size; a <sup> line is drawn at 70% of it
CHAR_WIDTH = 0.5  # a character's mean width in its font size, Arial-like (0.45 measured on plain text; digits 0.56)


def _visible(text: str) -> str:
    return re.sub(r"<[^>]+>", "", text)


def _wrap(words: list[str], limit: int) -> list[str]:
    lines: list[str] = []
    for w in words:
        if lines and len(_visible(lines[-1])) + 1 + len(_visible(w)) <= limit:
            lines[-1] += " " + w
        else:
            lines.append(w)
    return lines


def whole_title(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` whose title and ``<sup>`` subtitle lines are wrapped to its width, with room above.

    A static image has a fixed width (the layout's, else 700 px) and plotly does not wrap titles, so a long
    subtitle is cut at the edge. Each ``<br>``-separated line too long for the width the title has (from its
    ``x``, 0.05 by default, to the right edge) in characters of its font size is wrapped; the top margin and the
    height (500 px when unset) grow by the added lines, so the plot keeps its size. A figure whose lines fit is
    returned as is.
    """
    text = fig.layout.title.text
    if not text:
        return fig
    width = fig.layout.width or PLOTLY_WIDTH
    size = fig.layout.title.font.size or TITLE_FONT
    room = width * (1 - (fig.layout.title.x if fig.layout.title.x is not None else 0.05)) - 10
    lines = []
    for line in re.split(r"<br\s*/?>", text):
        sub = re.fullmatch(r"\s*<sup>(.*)</sup>\s*", line, re.S)
        limit = max(20, math.floor(room / (CHAR_WIDTH * size * (0.7 if sub else 1.0))))
        if len(_visible(line).strip()) <= limit:
            lines.append(line)
        elif sub:
            lines += [f"<sup>{x}</sup>" for x in _wrap(sub.group(1).split(), limit)]
        else:
            lines += _wrap(line.split(), limit)
    added = len(lines) - len(re.split(r"<br\s*/?>", text))
    if added <= 0:
        return fig
    out = go.Figure(fig)
    grow = math.ceil(added * size * 1.2)
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 100
    out.update_layout(title_text="<br>".join(lines), margin_t=top + grow)
    out.update_layout(height=(fig.layout.height or PLOTLY_HEIGHT) + grow)
    return out


def _targets(path: str | os.PathLike, formats: Iterable[str] | None) -> list[tuple[Path, str]]:
    path = Path(path)
    if formats is None:
        fmt = path.suffix.lstrip(".").lower()
        if fmt not in _FORMATS:
            raise FixableValueError(
                f"cannot tell the format of {path} from its suffix. ",
                f"end it with one of {['.' + f for f in _FORMATS]} or pass formats=.",
            )
        return [(path, fmt)]
    out = []
    for fmt in formats:
        fmt = fmt.lower().lstrip(".")
        if fmt not in _FORMATS:
            raise FixableValueError(f"format {fmt!r} is not supported. ", f"use some of {_FORMATS}.")
        out.append(
            (path.with_suffix("." + fmt) if path.suffix.lstrip(".").lower() in _FORMATS else Path(f"{path}.{fmt}"), fmt)
        )
    return out


def save_figures(
    figures: Mapping[str | os.PathLike, go.Figure],
    formats: Iterable[str] | None = None,
    *,
    scale: float = 2.0,
    include_plotlyjs: bool | str = True,
) -> list[Path]:
    """Write each ``{path: figure}``; with ``formats`` each path is a stem written once per format.

    All static images are rendered in one kaleido batch (one browser start); every file is moved into place
    only when the whole export succeeded.

    Args:
        figures: without ``formats`` each path's suffix gives its format.
        formats: ``html``, ``png``, ``svg``, ``pdf``, ``jpeg``, ``webp``; a path's known suffix is replaced,
            otherwise ``.<fmt>`` is appended.
        scale: pixel scale of static images (2.0: twice the layout's size).
        include_plotlyjs: HTML: plotly's ``include_plotlyjs`` (True inlines plotly.js, ``"cdn"`` links it).

    Raises:
        ValueError: a format is unsupported or cannot be told from a path's suffix.
        ChromiumMissingError: a static format is asked for without kaleido or a browser.
    """
    jobs = [(fig, target, fmt) for path, fig in figures.items() for target, fmt in _targets(path, formats)]
    static = [(fig, target, fmt) for fig, target, fmt in jobs if fmt in STATIC_FORMATS]
    if static:
        require_chromium()
    written: list[Path] = []
    with contextlib.ExitStack() as stack:
        tmp_static = []
        for fig, target, fmt in jobs:
            tmp = stack.enter_context(atomic_path(target))
            if fmt == "html":
                fig.write_html(str(tmp), include_plotlyjs=include_plotlyjs, full_html=True)
            else:
                tmp_static.append((whole_title(fig), tmp, fmt))
            written.append(target)
        if tmp_static:
            import plotly.io as pio

            figs = [f for f, _, _ in tmp_static]
            # write_images (unlike write_image) ignores the layout's size, so pass it explicitly
            pio.write_images(
                figs,
                [str(t) for _, t, _ in tmp_static],
                format=[fmt for _, _, fmt in tmp_static],
                scale=scale,
                width=[f.layout.width for f in figs],
                height=[f.layout.height for f in figs],
            )
    return written


def save_figure(
    fig: go.Figure,
    path: str | os.PathLike,
    formats: Iterable[str] | None = None,
    *,
    scale: float = 2.0,
    include_plotlyjs: bool | str = True,
) -> list[Path]:
    """Write one figure: to ``path`` in the format of its suffix, or to ``path.<fmt>`` for each of ``formats``.

    Arguments and errors as in :func:`save_figures`.
    """
    return save_figures({path: fig}, formats, scale=scale, include_plotlyjs=include_plotlyjs)


def screenshot_html(
    html_path: str | os.PathLike,
    png_path: str | os.PathLike,
    *,
    width: int = 1280,
    height: int = 1600,
    scale: float = 1.0,
    wait_ms: int = 8000,
    timeout_s: float = 120.0,
) -> Path:
    """Render an HTML file in headless Chromium and save a PNG of the first ``width`` x ``height`` CSS pixels.

    ``wait_ms`` is Chromium's virtual-time budget for scripts (plotly, CircuitsVis) before the shot;
    ``timeout_s`` its wall-clock limit; the PNG is ``scale`` times the CSS size, written atomically.

    Raises:
        ChromiumMissingError: no Chromium-based browser is found.
        RuntimeError: Chromium fails or writes no image.
    """

    browser = find_chromium()
    if browser is None:
        raise ChromiumMissingError(
            "a screenshot needs a Chromium-based browser and none was found. ",
            "apt-get install -y chromium, or set BROWSER_PATH.",
        )
    html_path = Path(html_path).resolve()
    if not html_path.exists():
        raise FileNotFoundError(f"{html_path} does not exist; write the HTML first.")
    with atomic_path(png_path) as tmp:
        shot = tmp.with_suffix(".png")  # Chromium picks the image type from the suffix
        cmd = [
            browser,
            "--headless",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--force-device-scale-factor={scale}",
            f"--window-size={width},{height}",
            f"--virtual-time-budget={wait_ms}",
            f"--screenshot={shot}",
            html_path.as_uri(),
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            if proc.returncode != 0 or not shot.exists() or shot.stat().st_size == 0:
                raise RuntimeError(
                    f"Chromium could not screenshot {html_path} (exit {proc.returncode}): {proc.stderr[-800:]}"
                )
            os.replace(shot, tmp)
        finally:
            shot.unlink(missing_ok=True)
    return Path(png_path)
