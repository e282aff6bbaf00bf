"""The command line's first second: it parses before importing the model libraries, says its version, and its
``status`` refuses a missing run folder at once, shows disabled stages as off and takes only the options it uses."""

import contextlib
import io
import subprocess
import sys
import time

import pytest

import mathcircuits
from mathcircuits.cli import main

HEAVY = ("torch", "transformers", "transformer_lens", "datasets", "pandas")


def _run_main(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue()


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["status", "--help"], ["run", "--bogus"]])
def test_parsing_imports_no_model_library(argv):
    snippet = (
        "import sys\nfrom mathcircuits.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    res = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout


def test_status_of_a_missing_folder_is_a_one_line_error_before_torch(tmp_path):
    missing = tmp_path / "no-such-run"
    snippet = (
        "import sys, time\nt0 = time.perf_counter()\nfrom mathcircuits.cli import main\n"
        f"code = main(['status', '--out', {str(missing)!r}])\n"
        f"print(code, round(time.perf_counter() - t0, 2), sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    code, _seconds, heavy = res.stdout.strip().split(" ", 2)
    assert code == "2" and heavy == "[]", (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "mathcircuits run" in lines[0], res.stderr
    assert wall < 3, f"status of a missing folder took {wall:.1f} s (the interpreter included)"
    assert not missing.exists()  # asking wrote nothing


def test_version_is_the_package_version():
    code, text = _run_main("--version")
    assert code == 0 and text.strip() == f"mathcircuits {mathcircuits.__version__}"


def test_status_shows_disabled_stages_off_and_refuses_run_options(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  source: tiny-llama\nfinetune:\n  enabled: false\nnumbers:\n  enabled: false\n")
    (tmp_path / "run").mkdir()  # an empty run folder: every stage to do, or off
    code, text = _run_main("status", "--config", str(cfg), "--out", str(tmp_path / "run"))
    assert code == 0, text
    states = {line.split()[0]: line.split(None, 1)[1] for line in text.strip().splitlines()}
    assert states["finetune"].startswith("off") and states["numbers"].startswith("off"), states
    assert states["data"] == "todo" and states["evaluate"] == "todo", states
    code, text = _run_main("status", "--force", "--out", str(tmp_path / "run"))
    assert code == 2 and "--force" in text
