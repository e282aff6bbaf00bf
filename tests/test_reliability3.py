"""Reliability, round three: no silent acceptance, bounded work, files and locks that hold.

Each test drives one class of the issue through the CLI or the API: a clear error with exit code 2 and nothing
written, or the property the fix promises (one lock holder, outputs without temporary files, equal bytes).
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import mathcircuits._files as io_files
import mathcircuits.pipeline.markers as markers
from mathcircuits.ablation import HeadMeans
from mathcircuits.cli import main
from mathcircuits.pipeline import ConfigError, RunConfig, RunLockedError, run_pipeline
from mathcircuits.pipeline.lock import RunLock

from helpers import assert_clear as _assert_clear

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "configs" / "tiny.yaml"


def test_a_section_given_twice_is_refused_naming_the_key_and_both_lines(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    text = TINY_YAML.read_text()
    cfg.write_text(text + "\nmodel:\n  source: tiny-gpt2\n")  # a second model: section
    first = 1 + next(i for i, line in enumerate(text.splitlines()) if line.startswith("model:"))
    second = len(text.splitlines()) + 2
    out = tmp_path / "run"
    code = main(["run", "--config", str(cfg), "--out", str(out), "--quiet"])
    _assert_clear(code, capsys.readouterr().err, ("'model'", f"lines {first} and {second}", "twice"), out)


def test_a_key_given_twice_inside_a_section_is_refused(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("data:\n  seed: 1\n  n_per_template: 4\n  seed: 2\n")
    out = tmp_path / "run"
    code = main(["run", "--config", str(cfg), "--out", str(out), "--quiet"])
    _assert_clear(code, capsys.readouterr().err, ("'seed'", "lines 2 and 4"), out)


def _alias_bomb(levels: int = 9) -> str:
    """The "billion laughs": each level lists the one before nine times, 9**levels strings in all."""
    names = "abcdefghij"[: levels + 1]
    lines = [f'{names[0]}: &{names[0]} ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip(names, names[1:])]
    return "\n".join([*lines, f"data: {{operations: *{names[-1]}}}"]) + "\n"


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, capsys):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text(_alias_bomb())
    assert len(cfg.read_bytes()) < 500
    out = tmp_path / "run"
    start = time.monotonic()
    code = main(["run", "--config", str(cfg), "--out", str(out), "--quiet"])
    assert time.monotonic() - start < 5
    _assert_clear(code, capsys.readouterr().err, ("alias", "line 2"), out)


def test_a_huge_value_is_cut_short_in_the_message():
    bomb: list = ["lol"] * 9
    for _ in range(8):  # 9**9 strings through shared lists: the full repr would take minutes and GBs
        bomb = [bomb] * 9
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"operations=\[\[") as e:
        RunConfig.from_dict({"data": {"operations": bomb}})
    assert time.monotonic() - start < 5 and len(str(e.value)) < 400
    with pytest.raises(ConfigError, match=r"seed='x+\.\.\.x+' is not int") as e:
        RunConfig.from_dict({"data": {"seed": "x" * 10**6}})
    assert len(str(e.value)) < 400


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--config", str(TINY_YAML), "--out", ""],
        ["status", "--out", " "],
        ["compare-models", "a", "b", "--out", ""],
    ],
)
def test_an_empty_out_folder_is_refused(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:  # argparse's own errors end the process
        main([*argv, "--quiet"] if argv[0] == "run" else argv)
    err = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 2 and err.startswith("error: ") and err.count("Fix:") == 1, err
    assert "--out" in err and "current directory" in err and "Fix: name a folder" in err, err
    assert list(tmp_path.iterdir()) == []  # the current directory was not made a run folder


def test_an_empty_run_dir_is_refused_through_the_api(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="run_dir is empty.*current directory"):
        run_pipeline(RunConfig.load(TINY_YAML), "", progress=False)
    assert list(tmp_path.iterdir()) == []


def _contend(paths: list[str], barrier, won) -> None:  # noqa: ANN001 (multiprocessing objects)
    """One contender: at each trial take the trial's stale lock at the same moment as the other, hold it until
    both have tried, then let it go."""
    for i, path in enumerate(paths):
        lock = RunLock(Path(path))
        barrier.wait()
        try:
            lock.acquire()
            with won.get_lock():
                won[i] += 1
        except RunLockedError:
            pass
        barrier.wait()
        lock.release()


@pytest.mark.integration  # two processes (about 1 s)
def test_two_processes_taking_over_one_stale_lock_never_both_hold_it(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()  # its pid names a process that no longer runs
    trials = 200
    paths = [str(tmp_path / f"lock{i}") for i in range(trials)]
    for p in paths:
        Path(p).write_text(f"{dead.pid}\n")
    ctx = multiprocessing.get_context("fork")  # the contenders need nothing but os and fcntl: no re-import
    barrier, won = ctx.Barrier(2, timeout=30), ctx.Array("i", trials)
    procs = [ctx.Process(target=_contend, args=(paths, barrier, won)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert list(won) == [1] * trials, f"{sum(w != 1 for w in won)} of {trials} trials had not exactly one holder"
    assert not any(Path(p).exists() for p in paths)  # each winner removed its lock


_KILLED_MID_WRITE = """
import os, signal, sys
from mathcircuits._files import atomic_dir, atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text("half of a file")
    with atomic_dir(sys.argv[2]) as d:
        (d / "weights.bin").write_text("half of a checkpoint")
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.integration  # a writer in a subprocess (about 2 s)
def test_temporary_files_left_by_a_killed_write_are_not_outputs(tmp_path):
    stage = tmp_path / "identify"
    stage.mkdir()
    (stage / "key_components.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_WRITE, str(stage / "scores.pt"), str(stage / "ckpt")], env=env
    ).returncode
    assert code == -signal.SIGKILL
    left = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
    assert len(left) == 3 and sum(".tmp" in p for p in left) == 2, left  # the killed write's leftovers
    markers.write_marker(stage / ".done.json", "f", {}, [])
    assert json.loads((stage / ".done.json").read_text())["outputs"].keys() == {"key_components.json"}


def _elsewhere(tmp_path: Path) -> Path:
    """A folder outside the run, holding a file that no run may touch."""
    other = tmp_path / "another-run" / "data"
    other.mkdir(parents=True)
    (other / "pairs.json").write_text("theirs")
    return other


def test_a_stage_folder_linked_out_of_the_run_is_refused_not_emptied(tmp_path, capsys):
    other, out = _elsewhere(tmp_path), tmp_path / "run"
    out.mkdir()
    (out / "data").symlink_to(other, target_is_directory=True)
    code = main(["run", "--config", str(TINY_YAML), "--out", str(out), "--only", "data", "--quiet"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and err.startswith("error: ") and err.count("Fix:") == 1, err
    assert f"stage folder {out / 'data'} is a symbolic link to {other}" in err and "Fix: remove the link" in err
    assert sorted(p.name for p in out.iterdir()) == ["data"] and (other / "pairs.json").read_text() == "theirs"
    with pytest.raises(ValueError, match="symbolic link.*Fix: remove the link"):  # the last guard, by itself
        markers.clear_stage_folder(out / "data")
    assert (other / "pairs.json").read_text() == "theirs"


def test_clearing_a_stage_folder_removes_the_links_in_it_never_what_they_point_to(tmp_path):
    other, stage = _elsewhere(tmp_path), tmp_path / "run" / "data"
    (stage / "sub").mkdir(parents=True)
    (stage / "to-folder").symlink_to(other, target_is_directory=True)
    (stage / "sub" / "to-file").symlink_to(other / "pairs.json")
    (stage / "mine.json").write_text("ours")
    markers.clear_stage_folder(stage)
    assert stage.is_dir() and list(stage.iterdir()) == []
    assert [p.name for p in other.iterdir()] == ["pairs.json"] and (other / "pairs.json").read_text() == "theirs"


def _small_file_limit() -> None:  # in the child: files above 1 KiB fail with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.integration  # the CLI in a subprocess loads the tiny model (about 10 s)
def test_a_full_disk_names_the_file_and_says_disk_full(tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--config", str(TINY_YAML), "--out", str(out), "--only", "data", "--quiet"]
    res = subprocess.run(
        [sys.executable, "-c", f"import sys; from mathcircuits.cli import main; sys.exit(main({argv!r}))"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_small_file_limit,
        capture_output=True,
        text=True,
    )
    err = " ".join(res.stderr.split())
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"error: disk full: could not write {out / 'config.yaml'} (File too large)" in err, err
    assert err.count("Fix:") == 1 and "check the path and its permissions" not in err


def test_a_write_that_finds_no_room_names_its_file(tmp_path):
    target = tmp_path / "scores.json"
    with pytest.raises(OSError) as e, io_files.atomic_path(target):  # write() itself names no file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []  # and its temporary file is gone


def test_equal_values_save_to_equal_pt_bytes(tmp_path):
    """torch.save to a path names the zip's folder after the (random) temporary file: every re-run then changed the
    bytes, and with them every fingerprint downstream."""
    means = HeadMeans(means=torch.rand(3, 2, 4), n_prompts=5)
    a = means.save(tmp_path / "run1" / "means.pt")
    b = HeadMeans(means=means.means.clone(), n_prompts=5).save(tmp_path / "run2" / "head_means.pt")
    assert a.read_bytes() == b.read_bytes()
    assert torch.equal(HeadMeans.load(b).means, means.means)
    other = HeadMeans(means=means.means + 1, n_prompts=5).save(tmp_path / "run3" / "means.pt")
    assert other.read_bytes() != a.read_bytes()  # the bytes still follow the values
