"""Run the stages in registry order over one run folder, skipping those whose inputs are unchanged.

Each stage writes its outputs atomically and then a ``.done.json`` marker with
the fingerprint of its inputs (its config sections, the model section and its
upstream markers) and its typed summary. A stage whose marker matches is
skipped, so re-running a finished run is a no-op and an interrupted run
resumes at the first unfinished stage; the marker of a stage is removed before
it runs, so the partial outputs of an interrupted stage are never taken as done.

Before anything is written the run folder is checked (a folder, writable, and
not a finished run of another model), the installed dependency versions are
checked against the tested ranges (:mod:`mathcircuits.models.compat`), and the
folder is locked for the run.

While the stages run, fast paths are on or off as ``model.fast_paths`` says, and
each fast path checks itself on the model before its first use
(:mod:`mathcircuits.models.integrity`); the checks a stage ran are recorded in its
marker. An exception that no input caused (any error without the toolkit's
``Fix:`` form) ends as :class:`InternalError` naming the stage, with the
traceback kept in ``logs/traceback-<stage>.txt``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import yaml

from mathcircuits._io import atomic_path, read_json, write_json
from mathcircuits.models import check_versions, checks_run, fast_paths
from mathcircuits.models.compat import installed_versions
from mathcircuits.pipeline.config import RunConfig, fingerprint
from mathcircuits.pipeline.console import quiet_dependencies
from mathcircuits.pipeline.context import Context, StageSummary
from mathcircuits.pipeline.lock import RunLock
from mathcircuits.pipeline.paths import RunPaths
from mathcircuits.pipeline.stages import STAGES

__all__ = [
    "STAGES",
    "InternalError",
    "RunFolderError",
    "check_run_folder",
    "done_summary",
    "is_input_error",
    "run_pipeline",
    "stage_status",
]

log = logging.getLogger(__name__)


class RunFolderError(ValueError):
    """The run folder cannot hold this run; the message says why and how to fix it."""


class InternalError(RuntimeError):
    """A stage failed for a reason no input explains: a bug in mathcircuits or in a dependency.

    Args:
        stage: the stage that failed.
        message: the original error's text.
        traceback_file: where its traceback was written.
    """

    def __init__(self, stage: str, message: str, traceback_file: Path) -> None:
        self.stage, self.traceback_file = stage, traceback_file
        super().__init__(
            f"internal error in stage {stage}: {message}\n"
            f"  this is a bug in mathcircuits or a dependency; the versions are in versions.json and the "
            f"traceback is in {traceback_file}"
        )


def is_input_error(err: BaseException) -> bool:
    """Whether an error is one the toolkit raises for a bad input (or environment) and words as such.

    The toolkit's own checks end their message with ``Fix: <what to do>``; an ``OSError`` (missing file,
    permissions, full disk) concerns the environment. Anything else is internal.

    Args:
        err: the exception.

    Returns:
        True for the toolkit's worded errors and OS errors.
    """
    return isinstance(err, OSError) or "Fix:" in str(err)


def _fingerprint(paths: RunPaths, cfg: RunConfig, name: str) -> str:
    stage, d = STAGES[name], cfg.to_dict()
    ups = []
    for u in stage.upstream:
        marker = paths.marker(u)
        ups.append(read_json(marker)["fingerprint"] if marker.exists() else None)
    return fingerprint(name, {s: d[s] for s in stage.sections}, d["model"], ups)


def stage_status(run_dir: str | Path, cfg: RunConfig) -> dict[str, str]:
    """Each stage's state in a run folder.

    Args:
        run_dir: the run folder.
        cfg: the config to compare with.

    Returns:
        Stage name → ``done`` (marker matches), ``stale`` (marker from other inputs) or ``todo``.
    """
    paths = RunPaths(Path(run_dir))
    out = {}
    for name in STAGES:
        marker = paths.marker(name)
        if not marker.is_file():
            out[name] = "todo"
        else:
            out[name] = "done" if read_json(marker)["fingerprint"] == _fingerprint(paths, cfg, name) else "stale"
    return out


def done_summary(run_dir: str | Path, name: str) -> StageSummary:
    """The typed summary a finished stage left in its marker.

    Args:
        run_dir: the run folder.
        name: the stage.

    Returns:
        The stage's summary (its own :class:`StageSummary` subclass).
    """
    marker = RunPaths(Path(run_dir)).marker(name)
    return STAGES[name].summary.from_dict(read_json(marker)["summary"], source=marker)


def check_run_folder(run_dir: str | Path, cfg: RunConfig, force: bool = False) -> None:
    """Refuse, before writing anything, a run folder that cannot take this run.

    Args:
        run_dir: the run folder (need not exist).
        cfg: the run's config.
        force: accept a folder holding a finished run of another model.

    Returns:
        None; raises :class:`RunFolderError` naming the problem and the fix.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFolderError(f"--out {run_dir} is a file, not a folder. Fix: give a folder path (it is created).")
    existing = next(p for p in (run_dir, *run_dir.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise RunFolderError(
            f"--out {run_dir} lies under {existing}, which is a file. Fix: give a folder path "
            "whose parents are folders."
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunFolderError(
            f"--out {run_dir} cannot be written ({existing} is read-only). "
            "Fix: choose a writable --out folder, or make it writable (chmod u+w)."
        )
    paths = RunPaths(run_dir)
    finished = any(paths.marker(n).is_file() for n in STAGES)
    if force or not finished or not paths.config.is_file():
        return  # a folder with no finished stage takes any config (a failed first run does not block it)
    try:
        old_model = (yaml.safe_load(paths.config.read_text()) or {}).get("model") or {}
    except yaml.YAMLError:
        old_model = {}
    new_model = cfg.to_dict()["model"]
    # compare the model section only: the rest of an older config may use keys this version no longer has
    if {k: old_model.get(k, v) for k, v in new_model.items()} != new_model:
        raise RunFolderError(
            f"{run_dir} holds a run of model {old_model.get('source')!r} ({old_model}), not {cfg.model.source!r}. "
            "Fix: use another --out folder, or --force to overwrite."
        )


def _versions() -> dict[str, str]:
    names = ("mathcircuits", "torch", "transformers", "transformer-lens", "peft", "datasets", "accelerate", "lm_eval")
    return {"python": platform.python_version(), **installed_versions(names + ("circuitsvis", "plotly"))}


def run_pipeline(
    cfg: RunConfig,
    run_dir: str | Path,
    only: list[str] | None = None,
    force: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = log.info,
) -> dict[str, StageSummary]:
    """Run every stage (or ``only`` those) whose inputs changed, in pipeline order.

    Args:
        cfg: the run configuration (already checked when built).
        run_dir: the run folder (created if missing; locked while stages run).
        only: stage names to run; None runs all.
        force: re-run stages even when their inputs are unchanged.
        progress: show progress bars.
        echo: receives one line per stage start, skip and end.

    Returns:
        Stage name → its typed summary (read back from the marker for a skipped stage).
    """
    run_dir = Path(run_dir)
    paths = RunPaths(run_dir)
    names = list(STAGES)
    if only:
        bad = [n for n in only if n not in STAGES]
        if bad:
            raise ValueError(f"unknown stages {bad}. Fix: use some of {names}.")
        names = [n for n in names if n in only]
    check_versions()
    check_run_folder(run_dir, cfg, force)
    _check_upstream(paths, cfg, names)  # before anything is written: a refused stage leaves the folder as it was
    lock = RunLock(paths.lock)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except OSError as err:
        raise RunFolderError(
            f"--out {run_dir} cannot be written ({err.strerror or err}: {err.filename}). "
            "Fix: choose a writable --out folder, or make it writable (chmod u+w)."
        ) from err
    with lock, fast_paths(cfg.model.fast_paths == "on"), quiet_dependencies(paths.warnings_log):
        cfg.save(paths.config)
        write_json(paths.versions, _versions())
        ctx = Context(run_dir, cfg, progress=progress, force=force)
        summaries: dict[str, StageSummary] = {}
        for name in names:
            summaries[name] = _run_stage(ctx, name, echo)
    return summaries


def _check_upstream(paths: RunPaths, cfg: RunConfig, names: list[str]) -> None:
    """Every upstream stage of ``names`` that is not itself run now must be done, for this config."""
    for name in names:
        for u in STAGES[name].upstream:
            if u in names:
                continue  # runs first, in pipeline order
            if not paths.marker(u).is_file():
                raise RuntimeError(
                    f"stage {name!r} needs stage {u!r} first. Fix: run `mathcircuits {u}` (or `mathcircuits run`)."
                )
            if read_json(paths.marker(u))["fingerprint"] != _fingerprint(paths, cfg, u):
                raise RuntimeError(
                    f"stage {name!r} needs stage {u!r}, whose outputs are stale for this config. "
                    f"Fix: run `mathcircuits run` (or `mathcircuits {u}` first)."
                )


def _run_stage(ctx: Context, name: str, echo: Callable[[str], None]) -> StageSummary:
    stage, paths, cfg = STAGES[name], ctx.paths, ctx.config
    fp = _fingerprint(paths, cfg, name)
    marker = paths.marker(name)
    if not ctx.force and marker.is_file() and read_json(marker)["fingerprint"] == fp:
        echo(f"[{name}] up to date, skipped")
        return stage.summary.from_dict(read_json(marker)["summary"], source=marker)
    marker.unlink(missing_ok=True)  # outputs of an interrupted re-run must not pass for done
    echo(f"[{name}] running ...")
    t0 = time.perf_counter()
    checks_run(clear=True)
    try:
        result = stage.run(ctx)
    except Exception as err:
        if is_input_error(err):
            raise
        path = paths.traceback(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text("".join(traceback.format_exception(err)))
        raise InternalError(name, " ".join(str(err).split()) or type(err).__name__, path) from err
    summary = dataclasses.replace(result, seconds=round(time.perf_counter() - t0, 1))
    checks = [c.to_dict() for c in checks_run(clear=True)]
    for c in checks:
        echo(
            f"[{name}] fast path checked: {c['path']} equals its plain path (largest difference {c['difference']:.1e})"
        )
    write_json(marker, {"fingerprint": fp, "summary": summary.to_dict(), "checks": checks})
    echo(f"[{name}] done in {summary.seconds} s")
    return summary
