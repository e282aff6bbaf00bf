"""Tolerant extraction of a numeric answer from generated text.

LLM-Adapters (Hu et al., 2023), followed by Zhang et al. (ICML 2024), takes the last number in the reply,
correct within 1e-3 of the gold. We take a GSM8K-style ``#### 42``, else ``\\boxed{42}``, else the first
number after the *last* "answer is" / "answer:" marker (so a self-correction wins), else the last number.
Numbers may carry a sign, thousands separators, a currency or percent sign, a decimal part, or be a
fraction (``3/4``) or mixed number (``1 1/2``); right after a marker, a number word up to "twenty" too.
A hyphen glued to a preceding word or digit (``3-5``, ``x-5``) is not a sign.

Usage::

    extract_number("So 7 - 3 = 4. The answer is $1,234.50.")  # 1234.5
"""

from __future__ import annotations

import math
import re

__all__: list[str] = []

NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "  # noqa: SIM905
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}

# sign: "-" or unicode minus, not glued to a preceding word/digit/closing bracket;
# body: digits with optional thousands groups and decimals, or a bare ".5";
# optional fraction denominator directly after a slash.
_NUM = (
    r"(?P<sign>(?<![\w)\]])[-\u2212])?(?:[$\u20ac\u00a3]\s?)?"
    r"(?P<int>(?<![\w./])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<![\w./])\.\d+)"
    r"(?:/(?P<den>\d+(?:\.\d+)?)(?![\d.]*/))?"
)
_NUM_RE = re.compile(_NUM)
_MIXED_RE = re.compile(r"(?<![\w.,/])(?P<sign>-)?(?P<whole>\d+)\s+(?P<num>\d+)/(?P<den>\d+)(?![\d/])")
_HASH_RE = re.compile(r"####\s*(.*)", re.DOTALL)
_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
_MARKER_RE = re.compile(r"answer\s*(?:is|=|:|would\s+be|will\s+be)\s*:?", re.IGNORECASE)
_WORD_RE = re.compile(
    r"^[^\w-]*(" + "|".join(NUMBER_WORDS) + r")\b(?!\s*(?:hundred|thousand|million|billion|-))", re.IGNORECASE
)


def _value(m: re.Match) -> float | None:
    body = m.group("int").replace(",", "")
    try:
        value = float(body)
        den = m.group("den")
        if den is not None:
            d = float(den)
            if d == 0:
                return None
            value = value / d
    except ValueError:
        return None
    return -value if m.group("sign") else value


def _numbers(text: str) -> list[tuple[int, float]]:
    """(position, value) of every number in ``text``; a mixed number counts as one."""
    found: list[tuple[int, int, float]] = []
    taken: list[tuple[int, int]] = []
    for m in _MIXED_RE.finditer(text):
        whole, num, den = float(m.group("whole")), float(m.group("num")), float(m.group("den"))
        if den != 0 and num < den:  # "1 1/2", not "3 10/5"
            v = whole + num / den
            found.append((m.start(), m.end(), -v if m.group("sign") else v))
            taken.append((m.start(), m.end()))
    for m in _NUM_RE.finditer(text):
        if any(a <= m.start("int") < b for a, b in taken):
            continue
        v = _value(m)
        if v is not None and math.isfinite(v):
            found.append((m.start(), m.end(), v))
    return [(s, v) for s, _, v in sorted(found)]


def parse_number(text: str) -> float | None:
    """The first number in ``text`` (or a leading number word up to "twenty")."""
    w = _WORD_RE.match(text)
    if w:
        return float(NUMBER_WORDS[w.group(1).lower()])
    nums = _numbers(text)
    return nums[0][1] if nums else None


def extract_number(text: str | None) -> float | None:
    """The answer a model gave in ``text`` (see the module docstring for the rules)."""
    if text is None:
        return None
    text = text.replace("\u2212", "-")
    m = _HASH_RE.search(text)
    if m and (v := parse_number(m.group(1))) is not None:
        return v
    boxed = _BOXED_RE.findall(text)
    if boxed and (v := parse_number(boxed[-1])) is not None:
        return v
    markers = list(_MARKER_RE.finditer(text))
    for mk in reversed(markers):
        if (v := parse_number(text[mk.end() :])) is not None:
            return v
    nums = _numbers(text)
    return nums[-1][1] if nums else None


def answers_match(
    pred: str | float | int | None,  # noqa: PYI041 (the beartype hook rejects an int for float)
    gold: str | float | int,  # noqa: PYI041
    tol: float = 1e-3,
) -> bool:
    """True when the number in ``pred`` is within ``tol`` (absolute) of the gold answer.

    Strings go through :func:`extract_number` (for the gold answer too, so ``"8.0"``,
    ``"#### 8"`` and ``8`` are the same). A missing prediction never matches; a gold answer without
    a number raises ValueError.
    """
    p = pred if isinstance(pred, (int, float)) else extract_number(pred)
    g = gold if isinstance(gold, (int, float)) else extract_number(gold)
    if g is None:
        raise ValueError(f"gold answer {gold!r} contains no number; math benchmarks need a numeric gold answer.")
    if p is None or not math.isfinite(float(p)):
        return False
    return abs(float(p) - float(g)) <= tol
