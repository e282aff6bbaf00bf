"""Documents are for readers: no issue numbers in what a reader or user sees, and a README that is a front door
(what it is, two commands, then the first example within 500 words)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# "issue 35", "Issue #35", "issues #11, #27", "(#38)", "before #35"; not colours ("#222;", "#888"), HTML entities
# ("&#8212;"), anchors ("finetune.md#7-...") or hex ("#1f77b4").
ISSUE_REF = re.compile(r"\b[Ii]ssues?\s*#?\d+|(?<![\w#&/\"'-])#\d{1,4}\b(?![\w;\"'-])")
README_WORDS_BEFORE_EXAMPLE = 500


def _files() -> list[Path]:
    found = [ROOT / "README.md", ROOT / ".ci" / "run"]
    for pattern in (
        "docs/**/*.md",
        "configs/*.yaml",
        "mathcircuits/**/*.py",
        "scripts/*",
        "benchmarks/*.py",
        "benchmarks/*.md",
    ):
        found += sorted(p for p in ROOT.glob(pattern) if p.is_file())
    # the tests too, except this file, whose own examples are issue references
    found += sorted(p for p in ROOT.glob("tests/*.py") if p.name != Path(__file__).name)
    return [p for p in found if p.exists()]


def issue_refs(text: str) -> list[tuple[int, str]]:
    """(line number, matched text) of each issue reference in ``text``."""
    return [(n, m.group()) for n, line in enumerate(text.splitlines(), 1) for m in ISSUE_REF.finditer(line)]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("as issue #35 asks", ["issue #35"]),
        ("Issue 12 says", ["Issue 12"]),
        ("the budget (#38).", ["#38"]),
        ("(issues #11, #27)", ["issues #11", "#27"]),
        ("as before #35", ["#35"]),
        ("color: #222; background: #fff;", []),
        ('line=dict(color="#888")', []),
        ("colors = ['#1f77b4', '#ff7f0e']", []),
        ("[times](docs/finetune.md#7-the-comparison) &#8212; # 3 heads", []),
    ],
)
def test_the_pattern_finds_issue_refs_and_spares_colours_and_anchors(text, found):
    assert [m for _, m in issue_refs(text)] == found


def test_no_issue_references_in_what_readers_see():
    """A sentence says what changed, not which ticket asked for it; dated history may stay, numbers go."""
    files = _files()
    assert len(files) > 100, "the scan found the project's files"
    hits = [
        f"{p.relative_to(ROOT)}:{n}: {m}"
        for p in files
        for n, m in issue_refs(p.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not hits, "issue references (say what the change is instead):\n" + "\n".join(hits)


def test_readme_reaches_its_first_example_within_500_words():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "```python" in text, "the README has a Python example"
    words = len(text.split("```python", 1)[0].split())
    assert words <= README_WORDS_BEFORE_EXAMPLE, (
        f"README.md has {words} words before its first ```python block; at most {README_WORDS_BEFORE_EXAMPLE}: "
        "move detail and dated measurements to docs/ (times: docs/times-and-exit-codes.md)."
    )


def test_the_architecture_page_is_generated_from_the_code():
    """docs/architecture.md is the generator's output for today's registry, contracts and docstrings."""
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_architecture.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr


def test_every_import_in_scripts_docs_and_notebooks_resolves():
    """What a user copies (docs, README, notebooks) or runs (scripts, benchmarks, CI) imports names that exist."""
    import glob
    import importlib
    import json

    pattern = re.compile(r"from (mathcircuits[\w.]*) import \(?([\w, \n]+?)\)?(?:$|\n|;|\")", re.MULTILINE)
    roots = ["scripts/*", "benchmarks/*.py", "docs/**/*.md", "README.md", "notebooks/**/*.ipynb", ".ci/run"]
    missing = []
    for f in sorted({p for r in roots for p in glob.glob(str(ROOT / r), recursive=True)}):
        path = Path(f)
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".ipynb":
            cells = json.loads(text)["cells"]
            text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        for m in pattern.finditer(text):
            module = importlib.import_module(m.group(1))
            for name in (n.strip().split(" as ")[0] for n in m.group(2).replace("\n", " ").split(",")):
                if name.isidentifier() and not hasattr(module, name):
                    try:
                        importlib.import_module(f"{m.group(1)}.{name}")
                    except ImportError:
                        missing.append(f"{path.relative_to(ROOT)}: from {m.group(1)} import {name}")
    assert not missing, missing


def test_the_cards_rule_texts_are_the_rule_functions_own_and_docs_state_their_thresholds():
    """The card's "why each verdict" list shows each claim's rule in the deciding function's own words (its
    docstring, thresholds filled in from the code), and docs/claims.md states the same thresholds."""
    import html
    import inspect
    import sys

    from mathcircuits.claims import assess_claims, margin, paper
    from mathcircuits.claims.rules import RULES, rule_text
    from mathcircuits.report.html import Page
    from mathcircuits.report.sections.claims import ClaimsSection

    card = assess_claims()
    page = Page()
    ClaimsSection(card).render(page, ())
    shown = html.unescape("".join(page.parts))
    for c in card.claims:
        if c.id not in RULES:
            continue
        text = rule_text(c.id)
        assert f"rule: {text}" in shown, c.id
        first = inspect.getdoc(RULES[c.id]).split("\n\n")[0]
        for name in re.findall(r":data:`~?([\w.]+)`", first):  # every threshold named is filled in from the code
            value = vars(sys.modules[RULES[c.id].__module__])[name.rsplit(".", 1)[-1]]
            assert f"{value:.3g}" in text and name not in text, (c.id, name)
    docs = (ROOT / "docs" / "claims.md").read_text()
    stated = {
        "C1_MAX_REST": ("at most a third", paper.C1_MAX_REST == 1 / 3),
        "C2_MIN_COLLAPSE": (f"**{paper.C2_MIN_COLLAPSE:.2f}**", True),
        "C2_RANDOM_MARGIN": (
            f"margin of {100 * paper.C2_RANDOM_MARGIN:.0f} points",
            paper.C2_RANDOM_PAPER == 0.02,
        ),
        "C4_MIN_EXCESS": (f"**{margin.C4_MIN_EXCESS:.2f}**", True),
        "C4_MIN_SETS": (f"at least {margin.C4_MIN_SETS} random sets", True),
        "C5_MIN_SETS": (f"**at least {paper.C5_MIN_SETS}**", True),
        "C5_MIN_OVERLAP": (f"at least\n**{paper.C5_MIN_OVERLAP}**", True),
    }
    for name, (text, same) in stated.items():
        assert same and " ".join(text.split()) in " ".join(docs.split()), f"docs/claims.md does not state {name}"
