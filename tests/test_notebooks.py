"""The notebooks are committed executed (GitHub and nbviewer show their outputs), and they still run.

The committed file must hold a clean run: outputs in every notebook, execution counts 1..n from the top, no error,
no warning on stderr, no machine path, at least one figure and a static PNG beside every Plotly figure (GitHub runs
no JavaScript), and its measured run time in the first markdown cell (``scripts/run_notebooks.py`` writes all
that). The slow test executes a copy in memory, never the committed file.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PLOTLY = "application/vnd.plotly.v1+json"
RUN_TIME = re.compile(r"\*\*Run time\*\* .*\d+ s wall, .*\d+ s CPU.* on 20\d\d-\d\d-\d\d \(.*load average \d")
WARNING = re.compile(r"\w*Warning\b")


class _Node(dict):
    """A notebook's JSON with attribute access (``cell.outputs``), as nbformat gives it, without nbformat's
    schema validation (importing it builds an RFC 3987 grammar: 2 s of the quick loop)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _read(path):
    """The notebook with its multiline strings joined (on disk they are lists of lines), as nbformat reads it."""
    nb = json.loads(path.read_text(encoding="utf-8"), object_hook=_Node)
    for cell in nb.cells:
        cell["source"] = _joined(cell.source)
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = _joined(out.text)
            for mime, value in out.get("data", {}).items():
                out.data[mime] = _joined(value)
    return nb


def _joined(value):
    return "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _outputs_problems(nb):
    """Errors, warnings on stderr, Plotly figures without a PNG, and machine paths in the outputs."""
    found = []
    for i, cell in enumerate(_code(nb)):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                found.append(f"code cell {i}: {out.ename}: {out.evalue}")
            if out.output_type == "stream" and out.name == "stderr" and WARNING.search(out.text):
                found.append(f"code cell {i}: a warning on stderr: {out.text.strip()[:300]}")
            data = out.get("data", {})
            if PLOTLY in data and "image/png" not in data:
                found.append(f"code cell {i}: a Plotly figure without its static image/png")
            text = out.get("text", "") + "".join(str(v) for k, v in data.items() if k.startswith("text/"))
            found += [  # with the text around it: what printed the path
                f"code cell {i}: names the machine path {p} ({out.output_type} {out.get('name', '')}: "
                f"{text[max(0, text.index(p) - 150) : text.index(p) + 150]!r})"
                for p in ("/tmp/", "/work/", "/root/")
                if p in text
            ]
    return found


def test_notebooks_found():
    assert len(NOTEBOOKS) >= 6, f"expected the six tutorials in {ROOT / 'notebooks'}, found {NOTEBOOKS}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_executed(path):
    nb = _read(path)
    code = _code(nb)
    assert any(c.outputs for c in code), f"{path.name} is committed without outputs. Fix: scripts/run_notebooks.py"
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"{path.name}: execution counts {counts} are not one clean run from the top. Fix: scripts/run_notebooks.py"
    )
    assert _outputs_problems(nb) == []
    figures = [o for c in code for o in c.outputs if PLOTLY in o.get("data", {})]
    assert figures, f"{path.name} shows no figure: each tutorial shows its results as at least one"
    assert all(o.data["image/png"] for o in figures)
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    assert RUN_TIME.search(first.source), f"{path.name}: its first markdown cell does not state the measured run time"


def test_problems_are_seen():
    """The checks above can fail: each problem planted in a notebook is reported."""

    def cell(**output):
        return {"cell_type": "code", "source": "", "outputs": [output]}

    planted = {"cells": [
        cell(output_type="error", ename="ValueError", evalue="bad", traceback=[]),
        cell(output_type="stream", name="stderr", text="x.py:1: FutureWarning: soon\n"),
        cell(output_type="display_data", data={PLOTLY: {"data": []}, "text/plain": "Figure"}),
        cell(output_type="stream", name="stdout", text="saved to /tmp/abc/view.html\n"),
        cell(output_type="stream", name="stderr", text="scoring pairs: 100%|###| 12/12\n"),
    ]}  # fmt: skip
    nb = json.loads(json.dumps(planted), object_hook=_Node)
    found = _outputs_problems(nb)
    assert [f.split(":")[0] for f in found] == [f"code cell {i}" for i in range(4)], found


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.from_dict(_read(path))  # a copy in memory: the committed file is not written
    for cell in _code(nb):
        cell.outputs = []
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    assert any(c.outputs for c in _code(nb))
    assert _outputs_problems(nb) == []
    assert any(PLOTLY in o.get("data", {}) for c in _code(nb) for o in c.outputs) == _has_plotly(_read(path))


def _has_plotly(nb):
    return any(PLOTLY in o.get("data", {}) for c in _code(nb) for o in c.outputs)


TEACHING = ROOT / "notebooks" / "04_teaching.ipynb"
ANSWER_TAGS = {"check", "reveals-answer"}  # scripts/student_copy.py clears these cells' outputs


def _answer_cells(nb):
    return [i for i, c in enumerate(nb.cells) if ANSWER_TAGS & set(c.get("metadata", {}).get("tags", []))]


def test_student_copy_shows_no_answers():
    teaching, student = _read(TEACHING), _read(ROOT / "notebooks" / "student" / TEACHING.name)
    tagged = _answer_cells(teaching)
    assert len([i for i in tagged if teaching.cells[i].source.startswith("# check")]) == 8, "one check per exercise"
    assert all(teaching.cells[i].outputs for i in tagged)  # the teacher's notebook has the answers to hide
    from_student = [c.source.replace("](../solutions/", "](solutions/") for c in student.cells]  # links one up
    assert from_student == [c.source for c in teaching.cells], (
        "the student copy is older than notebooks/04_teaching.ipynb. Fix: python scripts/student_copy.py"
    )
    assert "](../solutions/teaching_04.py)" in student.cells[0].source
    assert _answer_cells(student) == tagged and all(student.cells[i].outputs == [] for i in tagged)
    kept = [i for i, c in enumerate(teaching.cells) if c.cell_type == "code" and i not in tagged]
    assert all(student.cells[i].outputs == teaching.cells[i].outputs for i in kept)  # the lesson's own outputs stay
    shown = json.dumps([c.get("outputs", []) for c in student.cells])
    assert "solutions.exercise_" not in shown and "passes" not in shown


@pytest.mark.slow
def test_teaching_notebook_alone_in_a_folder_says_where_the_solutions_are(tmp_path):
    import shutil

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    shutil.copy(TEACHING, tmp_path / TEACHING.name)  # no solutions/ beside it, nor in any folder above
    nb = nbformat.read(tmp_path / TEACHING.name, as_version=4)
    first_check = next(i for i, c in enumerate(nb.cells) if "check" in c.metadata.get("tags", []))
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells[: first_check + 1]):
            cell.outputs = []
            if cell.cell_type == "code":
                try:
                    client.execute_cell(cell, i)
                except CellExecutionError:
                    assert i == first_check, f"cell {i} failed: {cell.outputs}"
        # the message's fix: the repository's notebooks/ on sys.path, then the helpers' cell again
        helpers = next(i for i, c in enumerate(nb.cells) if "def find_solutions" in c.source)
        fix = nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(ROOT / 'notebooks')!r})")
        again = nbformat.v4.new_code_cell(nb.cells[helpers].source + "\nprint(solutions.__name__)")
        nb.cells += [fix, again]
        client.execute_cell(fix, len(nb.cells) - 2)
        client.execute_cell(again, len(nb.cells) - 1)
    said = "".join(o.get("text", "") for c in nb.cells[:first_check] for o in c.get("outputs", []))
    assert "solutions/teaching_04.py" in said and "are not found from this folder" in said, said
    [error] = [o for o in nb.cells[first_check].outputs if o.output_type == "error"]
    assert error.ename == "CheckFailed", error
    assert error.evalue.startswith("expected the list of positions") and "got no answer yet" in error.evalue, error
    assert "solutions.teaching_04" in "".join(o.get("text", "") for o in again.outputs), again.outputs
