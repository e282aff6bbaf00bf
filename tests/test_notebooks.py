"""The notebooks are committed executed (GitHub and nbviewer show their outputs), and they still run.

The committed file must hold a clean run: outputs in every notebook, execution counts 1..n from the top, no error,
no warning on stderr, no machine path, a static PNG beside every Plotly figure (GitHub runs no JavaScript), and its
measured run time in the first markdown cell (``scripts/run_notebooks.py`` writes all that). The slow test executes
a copy in memory, never the committed file.
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
            found += [f"code cell {i}: names the machine path {p}" for p in ("/tmp/", "/work/", "/root/") if p in text]
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
