"""Run the stages in registry order over one run folder, skipping those that are done.

Each stage writes its outputs atomically and then a ``.done.json`` marker
(:mod:`~mathcircuits.pipeline.markers`). A done stage is skipped, so re-running a finished run is a no-op; an
interrupted run resumes at the first unfinished stage; a stage that runs for another fingerprint first
clears its folder, so outputs of an earlier configuration never mix into a new one.

Before anything is written the run folder is checked (writable, and not a finished run of another model),
the installed dependency versions are checked against the tested ranges (:mod:`mathcircuits.models.compat`),
the upstream stages of the requested ones must be done, and the config is checked against the loaded model;
then the folder is locked and ``config.yaml`` written.

Each fast path (``model.fast_paths``) checks itself on the model before its first use
(:func:`~mathcircuits.models.verify_once`), and the checks are recorded in the stage's marker. An
exception no input caused (any error without the ``Fix:`` form) ends as :class:`InternalError` naming the
stage, with the traceback in ``logs/traceback-<stage>.txt``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch
import yaml

from mathcircuits._errors import FixableError
from mathcircuits._files import DISK_FULL, JSONObject, atomic_path, read_json, write_json
from mathcircuits.models import checks_run, fast_paths
from mathcircuits.models.compat import check_versions, installed_versions
from mathcircuits.models.embedded import canonical_source
from mathcircuits.pipeline.config import ConfigError, RunConfig, check_folders, fingerprint, fingerprinted
from mathcircuits.pipeline.console import quiet_dependencies
from mathcircuits.pipeline.context import Context, StageSummary
from mathcircuits.pipeline.lock import RunLock
from mathcircuits.pipeline.markers import (
    StageState,
    clear_stage_folder,
    linked_folder,
    outputs_digest,
    read_marker,
    states,
    verify_outputs,
    write_marker,
)
from mathcircuits.pipeline.memory import MemoryMeter, cuda_devices
from mathcircuits.pipeline.paths import RunPaths
from mathcircuits.pipeline.registry import stages
from mathcircuits.pipeline.study import Study

__all__ = [
    "RunFolderError",
    "run_pipeline",
]

log = logging.getLogger(__name__)


class RunFolderError(FixableError, ValueError):
    """The run folder cannot hold this run; the message says why and how to fix it."""


class InternalError(RuntimeError):
    """A stage failed for a reason no input explains: a bug in mathcircuits or in a dependency.

    ``traceback_file`` is where its traceback was written.
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

    The toolkit's own checks raise a :class:`~mathcircuits._errors.FixableError` (a problem and its fix); an
    ``OSError`` (missing file, permissions, full disk) concerns the environment. Anything else is internal.
    """
    return isinstance(err, (OSError, FixableError))


def _model_section(d: dict[str, JSONObject]) -> JSONObject:
    """The model section as fingerprints see it: ``fast_paths`` is left out, since fast and plain paths give
    the same numbers (each fast path is checked against its plain one at run time), and so is ``device_map``,
    since where the layers sit does not change what they compute (``tests/test_big_models.py``)."""
    return {k: v for k, v in d["model"].items() if k not in ("fast_paths", "device_map")}


def _on_cuda(cfg: RunConfig) -> bool:
    """Whether the run's model computes on CUDA devices (their allocations are then what a stage's peak measures)."""
    return torch.cuda.is_available() and (cfg.model.device.startswith("cuda") or bool(cfg.model.device_map))


def _fingerprint(paths: RunPaths, cfg: RunConfig, name: str, markers: Mapping[str, JSONObject] | None = None) -> str:
    stage, d = stages()[name], fingerprinted(cfg.to_dict())
    ups = []
    for u in stage.reads:
        m = markers.get(u) if markers is not None else read_marker(paths.marker(u))
        ups.append(None if m is None else [m["fingerprint"], outputs_digest(m.get("outputs", {}))])
    return fingerprint(name, {s: d[s] for s in stage.settings}, _model_section(d), ups)


def stage_status(run_dir: str | Path, cfg: RunConfig, verify: bool = True) -> dict[str, StageState]:
    """Each stage's state in a run folder, with the reason when it is stale.

    ``verify=False`` trusts the markers' hashes (faster on big folders). ``done``: marker matches the config,
    outputs intact, upstream done; ``stale`` (with the reason); ``todo``.
    """
    paths = RunPaths(Path(run_dir))
    every = stages()
    return states(
        list(every),
        lambda n: every[n].reads,
        paths.stage,
        paths.marker,
        lambda n, markers: _fingerprint(paths, cfg, n, markers),
        verify=verify,
    )


def done_summary(run_dir: str | Path, name: str) -> StageSummary:
    """The typed summary a finished stage left in its marker."""
    marker = RunPaths(Path(run_dir)).marker(name)
    return stages()[name].summary.from_dict(read_json(marker)["summary"], source=marker)


def _identity_model(paths: RunPaths) -> JSONObject | None:
    """The model section the folder was created for (its identity file; older folders: config.yaml)."""
    if paths.identity.is_file():
        try:
            model = dict(read_json(paths.identity)["model"])
        except (ValueError, KeyError, TypeError, OSError):
            return None
        return model | {"source": canonical_source(str(model.get("source")))}  # made under an alias: the same model
    if paths.config.is_file():
        try:
            return (yaml.safe_load(paths.config.read_text()) or {}).get("model") or None
        except yaml.YAMLError:
            return None
    return None


def misplaced(paths: RunPaths, names: Iterable[str]) -> str:
    """A file where a run folder's stage folder (or ``logs``) belongs, or a folder where its ``.run.json``,
    ``config.yaml``, ``versions.json`` or lock file belongs: the problem and its fix, or ``""``."""
    for folder in [*(paths.stage(n) for n in names), paths.logs]:
        if folder.exists() and not folder.is_dir():
            return (
                f"{folder} is a file, where the run's folder {folder.name}/ belongs. Fix: move or delete that file "
                "(mathcircuits writes no file of that name), or use another --out folder"
            )
    for file, what in ((paths.identity, "identity"), (paths.config, "config"), (paths.versions, "versions"),
                       (paths.lock, "lock")):  # fmt: skip
        if file.is_dir() and not file.is_symlink():
            return (
                f"{file} is a folder, where the run's {what} file belongs. Fix: move or delete that folder, or use "
                "another --out folder"
            )
    return ""


def check_run_folder(run_dir: str | Path, cfg: RunConfig, force: bool = False) -> None:
    """Refuse, before writing anything, a run folder that cannot take this run.

    The folder's identity (the model it was created for) lives in ``.run.json``, which the user is not meant to
    edit; a finished run of another model is refused unless ``force``. Raises :class:`RunFolderError`.
    """
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFolderError(f"--out {run_dir} is a file, not a folder. ", "give a folder path (it is created).")
    existing = next(p for p in (run_dir, *run_dir.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise RunFolderError(
            f"--out {run_dir} lies under {existing}, which is a file. ", "give a folder path whose parents are folders."
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunFolderError(
            f"--out {run_dir} cannot be written ({existing} is read-only). ",
            "choose a writable --out folder, or make it writable (chmod u+w).",
        )
    paths = RunPaths(run_dir)
    every = stages()
    for name in every:
        if problem := linked_folder(paths.stage(name)):
            raise RunFolderError(problem + ".")
    if problem := misplaced(paths, every):
        raise RunFolderError(problem + ".")
    finished = any(paths.marker(n).is_file() for n in every)
    old_model = _identity_model(paths)
    if force or not finished or old_model is None:
        return  # a folder with no finished stage takes any config (a failed first run does not block it)
    new_model = _model_section(cfg.to_dict())
    # compare the model section only: the rest of an older config may use keys this version no longer has
    if {k: old_model.get(k, v) for k, v in new_model.items()} != new_model:
        raise RunFolderError(
            f"{run_dir} holds a run of model {old_model.get('source')!r} ({old_model}), not {cfg.model.source!r}. ",
            "use another --out folder, or --force to overwrite.",
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
    """Run every stage (or ``only`` those) whose inputs changed or whose outputs were damaged, in pipeline order.

    Nothing is written before the config has been checked against the model (head counts, ...), the dependency
    versions and the folder have been checked, and the upstream stages of ``only`` are done.

    Args:
        run_dir: created if missing; locked while stages run.
        force: re-run stages even when their inputs are unchanged.
        echo: receives one line per stage start, skip and end.

    Returns:
        Stage name → its typed summary (read back from the marker for a skipped stage).
    """
    if not str(run_dir).strip():  # Path("") is the current directory
        raise ConfigError("run_dir is empty, which would make the current directory the run folder. ", "name one.")
    run_dir = Path(run_dir)
    paths = RunPaths(run_dir)
    every = stages()
    names = list(every)
    if only:
        if bad := [n for n in only if n not in every]:
            raise ConfigError(f"unknown stages {bad}. ", f"use some of {names}.")
        names = [n for n in names if n in only]
    check_versions()
    check_run_folder(run_dir, cfg, force)
    current = stage_status(run_dir, cfg)
    _check_upstream(current, names)  # before anything is written: a refused stage leaves the folder as it was
    ctx = Context(run_dir, cfg, progress=progress, force=force)
    if todo := [n for n in names if force or current[n].state != "done"]:
        check_folders(cfg, todo)  # benchmark folders hold what is named in them
        codes = [every[n].code() for n in todo]
        for code in codes:
            if code.check is not None:
                code.check(cfg, todo)  # a study's own checks of its settings, e.g. that its splits hold enough pairs
        with fast_paths(cfg.model.fast_paths == "on"), quiet_dependencies(Path(os.devnull)):
            cfg.check_model(ctx.model.spec)  # e.g. precise@K within the model's heads; loads the model once
            for code in codes:
                if code.preflight is not None:
                    code.preflight(ctx, todo)  # a study's checks that need the model, e.g. its tokenizer
    lock = RunLock(paths.lock)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except OSError as err:
        if err.errno in DISK_FULL:
            raise  # the CLI says "disk full" and names the file
        raise RunFolderError(
            f"--out {run_dir} cannot be written ({err.strerror or err}: {err.filename}). ",
            "choose a writable --out folder, or make it writable (chmod u+w).",
        ) from err
    with lock, fast_paths(cfg.model.fast_paths == "on"), quiet_dependencies(paths.warnings_log):
        previous = paths.config.read_text() if paths.config.is_file() else None
        cfg.save(paths.config)
        if force or not paths.identity.is_file() or not any(paths.marker(n).is_file() for n in every):
            write_json(paths.identity, {"model": _model_section(cfg.to_dict()), "created_by": _versions()})
        write_json(paths.versions, _versions())
        summaries: dict[str, StageSummary] = {}
        try:
            for name in names:
                summaries[name] = _run_stage(ctx, every[name], echo, current[name])
        except BaseException:
            if previous is not None and not summaries:  # a call that finished no stage leaves the config as it was
                with atomic_path(paths.config) as tmp:
                    tmp.write_text(previous)
            raise
    return summaries


def _check_upstream(current: dict[str, StageState], names: list[str]) -> None:
    """Every upstream stage of ``names`` that is not itself run now must be done, for this config."""
    every = stages()
    for name in names:
        for u in every[name].reads:
            if u in names:
                continue  # runs first, in pipeline order
            if current[u].state == "todo":
                raise ConfigError(
                    f"stage {name!r} needs stage {u!r} first. ", f"run `mathcircuits {u}` (or `mathcircuits run`)."
                )
            if current[u].state == "stale":
                raise ConfigError(
                    f"stage {name!r} needs stage {u!r}, whose outputs are stale: {current[u].reason}. ",
                    f"run `mathcircuits run` (or `mathcircuits {u}` first).",
                )


def _run_stage(ctx: Context, stage: Study, echo: Callable[[str], None], before: StageState) -> StageSummary:
    name, paths, cfg = stage.name, ctx.paths, ctx.config
    fp = _fingerprint(paths, cfg, name)
    marker, folder = paths.marker(name), paths.stage(name)
    done = read_marker(marker)
    if not ctx.force and done is not None and done["fingerprint"] == fp:
        damaged = verify_outputs(folder, done.get("outputs", {}))
        if not damaged:
            echo(f"[{name}] up to date, skipped")
            return stage.summary.from_dict(done["summary"], source=marker)
        before = StageState("stale", damaged)
    running = read_marker(paths.running(name))
    resume = not ctx.force and running is not None and running["fingerprint"] == fp
    if resume:
        marker.unlink(missing_ok=True)  # an interrupted run of the same inputs: keep its checkpoints
    else:
        clear_stage_folder(folder)  # no output of an earlier configuration survives into this one
    write_json(paths.running(name), {"fingerprint": fp})
    why = f" ({before.reason})" if before.state == "stale" and not resume else ""
    echo(f"[{name}] {'resuming' if resume else 'running'} ...{why}")
    t0 = time.perf_counter()
    checks_run(clear=True)
    try:
        with MemoryMeter(cuda_devices() if _on_cuda(cfg) else ()) as meter:
            result = stage.run(ctx)
    except Exception as err:
        if is_input_error(err):
            raise
        path = paths.traceback(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_text("".join(traceback.format_exception(err)))
        raise InternalError(name, " ".join(str(err).split()) or type(err).__name__, path) from err
    summary = dataclasses.replace(result, seconds=round(time.perf_counter() - t0, 1), peak_memory=meter.peak)
    checks = [c.to_dict() for c in checks_run(clear=True)]
    for c in checks:
        echo(
            f"[{name}] fast path checked: {c['path']} equals its plain path (largest difference {c['difference']:.1e})"
        )
    write_marker(marker, fp, summary.to_dict(), checks)
    paths.running(name).unlink(missing_ok=True)
    echo(f"[{name}] done in {summary.seconds} s, peak memory {summary.peak_memory}")
    return summary
