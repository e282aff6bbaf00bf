"""Every bad input through the CLI ends as ``error: <problem>. Fix: <fix>`` (exit 2), writes nothing and leaves
the folder usable; each case names the key or path at fault."""

import contextlib
import io
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from mathcircuits.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())


def _cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``mathcircuits *args`` in this process (as the console script does) and capture its output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _assert_clear_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and ". Fix: " in last, res.stderr
    assert "Traceback" not in res.stderr
    for n in needles:
        assert n in last, (n, last)


def _config(tmp_path: Path, **sections: dict) -> Path:
    data = {k: dict(v) for k, v in TINY.items()}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("section", "values", "needles"),
    [
        ("data", {"n_per_template": 4.7}, ["[data] n_per_template=4.7", "whole number"]),
        ("data", {"operations": "add"}, ["[data] operations='add'", "list"]),
        ("validation", {"max_pairs": -5}, ["[validation] max_pairs=-5", ">= 1"]),
        ("patching", {"metric": "bogus"}, ["[patching] metric='bogus'", "relative_logit"]),
        ("model", {"source": "/nonexistent/model"}, ["[model] source='/nonexistent/model'", "does not exist"]),
        ("finetune", {"lr": 0.1}, ["[finetune] unknown keys ['lr']", "learning_rate"]),
        ("finetune", {"modes": ["precise@x"]}, ["precise@x", "precise@K"]),
        ("selection", {"rule": "top"}, ["[selection] rule='top'"]),
        ("analysis", {"static_formats": ["gif"]}, ["[analysis] static_formats=['gif']"]),
        ("data", {"keep_only_correct": "yes"}, ["[data] keep_only_correct='yes'", "true or false"]),
    ],
)
def test_bad_config_values_fail_at_load_and_write_nothing(tmp_path, section, values, needles):
    out = tmp_path / "o"
    res = _cli("run", "--config", str(_config(tmp_path, **{section: values})), "--out", str(out))
    _assert_clear_error(res, "bad.yaml", *needles)
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("c.yaml", "model: {source: tiny-llama\ndata: [", "not valid YAML"),
        ("c.toml", "[model\nsource = 1", "not valid TOML"),
        ("c.yaml", "- just\n- a list\n", "mapping of sections"),
        ("c.json", "{}", "must end in .yaml"),
    ],
)
def test_malformed_config_files(tmp_path, name, text, needle):
    (tmp_path / name).write_text(text)
    res = _cli("run", "--config", str(tmp_path / name), "--out", str(tmp_path / "o"))
    _assert_clear_error(res, str(tmp_path / name), needle)
    assert not (tmp_path / "o").exists()


def test_missing_config_file_and_bad_model_override(tmp_path):
    _assert_clear_error(_cli("run", "--config", "/no/such.yaml"), "/no/such.yaml", "does not exist")
    (tmp_path / "o").mkdir()  # status of a missing folder is refused before the model is looked at
    res = _cli("status", "--model", str(tmp_path / "nothing"), "--out", str(tmp_path / "o"))
    _assert_clear_error(res, "--model", "does not exist")


def test_out_that_is_a_file_or_lies_under_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("keep me")
    cfg = str(ROOT / "configs" / "tiny.yaml")
    _assert_clear_error(_cli("run", "--config", cfg, "--out", str(f)), str(f), "is a file")
    _assert_clear_error(_cli("data", "--config", cfg, "--out", str(f / "sub" / "run")), "lies under", str(f))
    assert f.read_text() == "keep me"


@pytest.mark.integration
def test_read_only_out(tmp_path):
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        out = ro / "run"
    elif subprocess.run(["mkdir", "/sys/mathcircuits-probe"], capture_output=True, check=False).returncode != 0:
        out = Path("/sys/mathcircuits-probe")  # root ignores modes; sysfs refuses new folders even to root
    else:  # pragma: no cover - depends on the machine
        pytest.skip("no read-only location available to this user")
    res = _cli("run", "--config", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out))
    _assert_clear_error(res, str(out), "cannot be written", "writable")
    assert not out.exists()


def test_unknown_stage_is_refused_by_the_parser(tmp_path):
    res = _cli("run", "--only", "identfy", "--out", str(tmp_path / "o"))
    _assert_clear_error(res, "invalid choice: 'identfy'", "--help")
    assert not (tmp_path / "o").exists()


def test_stage_without_its_upstream_writes_nothing(tmp_path):
    out = tmp_path / "o"
    res = _cli("validate", "--config", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out))
    _assert_clear_error(res, "needs stage 'data' first", "mathcircuits data")
    assert not out.exists() or not any(out.iterdir())
