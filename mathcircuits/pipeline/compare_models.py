"""``mathcircuits compare-models RUN_A RUN_B --out DIR``: two run folders of one config on two models, one page.

Reads each run folder's saved results as typed values (:class:`~mathcircuits.crossmodel.RunResults`), checks
that the two runs used the same configuration apart from the ``model`` section, and writes the comparison to
``DIR``. Unlike the pipeline's stages it owns no run folder: ``DIR`` may lie inside none (no folder at or above it
holds a ``.run.json``), and it holds each run's lock while it reads it, so a run being written is refused.

Usage::

    mathcircuits run --config configs/default.yaml --model gemma3-270m --out runs/gemma3
    mathcircuits compare-models runs/smollm2 runs/gemma3 --out runs/smollm2-vs-gemma3
"""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path
from typing import Any

from mathcircuits._errors import FixableFileNotFoundError
from mathcircuits._files import JSONObject, JSONValue, read_json
from mathcircuits._io import ResultFileError
from mathcircuits.ablation import KnockoutResult
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.claims import ClaimsCard
from mathcircuits.crossmodel import ModelComparison, RunResults, compare_runs
from mathcircuits.crossmodel.page import write_comparison
from mathcircuits.models.embedded import canonical_source
from mathcircuits.patching import KeyComponents
from mathcircuits.pipeline.config import ConfigError, RunConfig
from mathcircuits.pipeline.lock import RunLock, RunLockedError
from mathcircuits.pipeline.paths import RunPaths
from mathcircuits.pipeline.registry import stages
from mathcircuits.pipeline.run import RunFolderError, done_summary, misplaced, stage_status
from mathcircuits.pipeline.studies.shared import IdentifySummary
from mathcircuits.stats import Uncertainty
from mathcircuits.viz.export import find_chromium

__all__: list[str] = []


def _flat(d: JSONValue, prefix: str = "") -> dict[str, JSONValue]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, JSONValue] = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}.{k}" if prefix else k)
    return out


def check_same_config(a: RunConfig, b: RunConfig, where: tuple[str, str]) -> None:
    """Refuse two runs whose configurations differ outside the ``model`` section.

    ConfigError names the differing settings.
    """
    fa, fb = (_flat({k: v for k, v in c.to_dict().items() if k != "model"}) for c in (a, b))
    diff = sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
    if diff:
        shown = "; ".join(f"{k}: {fa.get(k)!r} vs {fb.get(k)!r}" for k in diff[:6])
        raise ConfigError(
            f"{where[0]} and {where[1]} were run with different configs ({shown}"
            f"{'; …' if len(diff) > 6 else ''}), so their claims are not comparable. ",
            "run both models with the same config file; only the model section (--model) may differ.",
        )


def _identity(paths: RunPaths) -> JSONObject:
    """The model section a run was made with (``.run.json``, which the user is not meant to edit)."""
    try:
        model = dict(read_json(paths.identity)["model"])
    except (ValueError, KeyError, TypeError) as err:
        raise FixableFileNotFoundError(
            f"{paths.identity} does not hold a run's identity ({type(err).__name__}). ",
            f"re-run the folder with mathcircuits run --out {paths.root} --force.",
        ) from err
    return model | {"source": canonical_source(str(model.get("source")))}  # made under an alias: the same model


def _optional(cls: type, path: Path) -> Any:
    return cls.load(path) if path.exists() else None


def load_run_results(folder: str | Path) -> tuple[RunResults, RunConfig]:
    """One run folder's results as typed values, and its config.

    ``folder``'s ``identify`` and ``report`` stages must be done; stages that were off leave their fields empty.

    Raises:
        FileNotFoundError: not a run folder, or a stage not done for its config.yaml (markers and output hashes
            checked as a resume checks them).
        ConfigError: config.yaml names another model than the run's identity (``.run.json``).
    """
    paths = RunPaths(Path(folder))
    if Path(folder).is_dir() and (problem := misplaced(paths, stages())):
        raise RunFolderError(problem + ".")
    if not paths.identity.is_file() or not paths.config.is_file():
        where = Path(folder)
        if not where.exists():
            what = "does not exist"
        elif not where.is_dir():
            what = "is a file"
        else:
            what = f"has no {(paths.config if paths.identity.is_file() else paths.identity).name}"
        raise FixableFileNotFoundError(
            f"{folder} is not a run folder: it {what}. ",
            "pass a folder written by `mathcircuits run`.",
        )
    identity = _identity(paths)
    cfg = RunConfig.load(paths.config)
    if (identity.get("source"), identity.get("dtype")) != (cfg.model.source, cfg.model.dtype):
        raise ConfigError(
            f"{folder}: config.yaml names model {cfg.model.source!r}, but the run was made with "
            f"{identity.get('source')!r} (.run.json); config.yaml was edited after the run. ",
            f"re-run it (mathcircuits run --out {folder} --config <its config>), or restore config.yaml.",
        )
    # the integrity layer, as a resume sees it: every stage's marker matches config.yaml, and its outputs hash
    unfinished = {n: s for n, s in stage_status(paths.root, cfg).items() if s.state != "done"}
    if unfinished:
        shown = "; ".join(f"{n}: {s}" for n, s in list(unfinished.items())[:4])
        raise FixableFileNotFoundError(
            f"{folder} is not a finished run ({shown}{'; …' if len(unfinished) > 4 else ''}), so its results "
            f"are not what its config.yaml describes. ",
            f"mathcircuits run --out {folder} --config {paths.config} (finishes or repairs it).",
        )
    key = KeyComponents.load(paths.key_components)
    ops = done_summary(paths.root, "identify")
    if not isinstance(ops, IdentifySummary):
        raise FixableFileNotFoundError(
            f"{folder}: the identify stage's marker holds no identify summary. ", "re-run identify."
        )
    knockout = {op: KnockoutResult.load(p) for op in ops.patched_operations if (p := paths.knockout(op)).exists()}
    try:
        results = RunResults(
            label=key.model.name,
            folder=str(folder),
            model=key.model,
            claims=ClaimsCard.load(paths.claims),
            key=key,
            knockout=knockout,
            attention=_optional(AttentionByRole, paths.attention()),
            probes=_optional(MLPProbeResult, paths.probes()),
        )
    except ResultFileError as err:
        raise ResultFileError(f"{err} (in run folder {folder}; re-run it with `mathcircuits run --force`)") from err
    return results, cfg


def _run_folder_above(out: Path) -> Path | None:
    """The nearest folder at or above ``out`` that holds a run (a ``.run.json``), or ``None``."""
    return next((p for p in (out, *out.parents) if RunPaths(p).identity.exists()), None)


def _lock(run: Path) -> RunLock | None:
    """Hold ``run``'s lock while it is read (RunLockedError when a live process writes it).

    A run folder this user cannot write has no writer of ours while it holds no lock file: it is read unlocked.
    """
    lock = RunLock(RunPaths(run).lock)
    try:
        lock.acquire()
    except RunLockedError:
        pid = lock.path.read_text().strip() if lock.path.is_file() else ""
        who = f"process {pid}" if pid.isdigit() else "another process"
        raise RunLockedError(
            f"run folder {run} is being written by {who} (it holds the lock {lock.path}), so its results are not "
            "final. ",
            "wait for that run to finish, then compare again.",
        ) from None
    except OSError as err:
        if err.errno in (errno.EACCES, errno.EROFS, errno.EPERM) and not lock.path.exists():
            return None
        raise
    return lock


def compare_model_runs(run_a: str | Path, run_b: str | Path, out: str | Path) -> ModelComparison:
    """Compare two run folders of one config on two models and write the page to ``out``.

    Each run's lock is held while it is read.

    Raises:
        FileNotFoundError: a folder is not a finished run.
        ConfigError: the two runs' configs differ outside the model section, or ``out`` lies inside a run folder.
        RunLockedError: a run is being written by another process.
    """
    out = Path(out)
    for run in (run_a, run_b):
        if out.resolve().is_relative_to(Path(run).resolve()):
            raise ConfigError(
                f"--out {out} lies inside the run folder {run}, whose files would then no longer match its markers. ",
                "write the comparison to a folder outside both runs.",
            )
    if (holder := _run_folder_above(out.resolve())) is not None:
        raise ConfigError(
            f"--out {out} lies inside the run folder {holder} (it holds a .run.json), whose files would then no "
            "longer match its markers. ",
            "write the comparison to a folder outside every run folder.",
        )
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder. ", "name a folder (it is created).")
    with contextlib.ExitStack() as held:
        for run in dict.fromkeys(Path(r).resolve() for r in (run_a, run_b)):  # one lock per folder
            if run.is_dir() and RunPaths(run).identity.is_file() and (lock := _lock(run)) is not None:
                held.callback(lock.release)
        (a, cfg_a), (b, cfg_b) = load_run_results(run_a), load_run_results(run_b)
    check_same_config(cfg_a, cfg_b, (str(run_a), str(run_b)))
    cmp = compare_runs(a, b, Uncertainty(confidence=a.claims.confidence, seed=cfg_a.data.seed))
    formats = list(cfg_a.analysis.static_formats) if find_chromium() is not None else []
    write_comparison(cmp, (a, b), out, formats=formats)
    return cmp
