"""Write a student copy of each teaching notebook: the same cells, without the outputs that give answers away.

    .venv/bin/python scripts/student_copy.py                                # every teaching notebook in notebooks/
    .venv/bin/python scripts/student_copy.py notebooks/04_teaching.ipynb    # one

A teaching notebook marks its cells with tags (cell metadata): ``check`` on each exercise's check cell, whose
committed output is the solution's (the check runs on it while the exercise holds ``...``), and
``reveals-answer`` on a cell that shows an answer's values. The copy, ``notebooks/student/<name>``, clears the
outputs and execution counts of those cells and keeps every other cell as committed (the lesson's own figures and
tables). A notebook without such tags is no teaching notebook and is skipped. Run it after
``scripts/run_notebooks.py`` has executed the notebook, and commit the copy with it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
#: The tags of the cells whose outputs a student copy clears.
ANSWER_TAGS = frozenset({"check", "reveals-answer"})
STUDENT = ROOT / "notebooks" / "student"


def gives_answers(cell: nbformat.NotebookNode) -> bool:
    """Whether the cell is tagged as one whose outputs hold an answer."""
    return cell.cell_type == "code" and bool(ANSWER_TAGS & set(cell.metadata.get("tags", ())))


def is_teaching(nb: nbformat.NotebookNode) -> bool:
    """Whether the notebook has cells tagged as holding answers."""
    return any(gives_answers(c) for c in nb.cells)


def student_copy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` with the outputs and execution counts of its answer cells cleared.

    Markdown links to ``solutions/`` point one folder up, where they are seen from ``notebooks/student/``.
    """
    copy = nbformat.from_dict(nb)
    for cell in copy.cells:
        if gives_answers(cell):
            cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            cell.source = cell.source.replace("](solutions/", "](../solutions/")
    return copy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb with tagged cells")
    parser.add_argument("--out", type=Path, default=STUDENT, help="folder of the copies (default: notebooks/student)")
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    written = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if not is_teaching(nb):
            if args.notebooks:  # named, but nothing to clear: say so
                print(f"{path.name}: no cell tagged {sorted(ANSWER_TAGS)}; no copy written", file=sys.stderr)
            continue
        dest = args.out / path.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(student_copy(nb), dest)
        shown = dest.resolve().relative_to(ROOT) if dest.resolve().is_relative_to(ROOT) else dest
        print(f"{path.name}: student copy in {shown} ({sum(gives_answers(c) for c in nb.cells)} cells cleared)")
        written += 1
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
