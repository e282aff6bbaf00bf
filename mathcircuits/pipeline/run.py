"""Run the pipeline stages in order over one run directory, skipping finished ones."""

from __future__ import annotations

import importlib.metadata
import logging
import platform
import time
from pathlib import Path
from typing import Any, Callable

from mathcircuits._io import read_json, write_json
from mathcircuits.pipeline import stages as S
from mathcircuits.pipeline.config import RunConfig, fingerprint

__all__ = ["STAGES", "run_pipeline", "stage_status"]

log = logging.getLogger(__name__)

# name → (function, config sections it reads, upstream stages)
STAGES: dict[str, tuple[Callable[[S.Context], dict[str, Any]], tuple[str, ...], tuple[str, ...]]] = {
    "data": (S.stage_data, ("model", "data"), ()),
    "identify": (S.stage_identify, ("patching", "selection"), ("data",)),
    "validate": (S.stage_validate, ("validation",), ("identify",)),
}


def _register_optional() -> None:
    """Stages after validation live in their own modules (kept small); add them in pipeline order."""
    from mathcircuits.pipeline import improve_stages, later_stages

    STAGES["analyze"] = later_stages.STAGES["analyze"]
    STAGES.update(improve_stages.STAGES)
    STAGES["report"] = later_stages.STAGES["report"]


_register_optional()


def _fingerprint(run_dir: Path, cfg: RunConfig, name: str) -> str:
    _, sections, upstream = STAGES[name]
    d = cfg.to_dict()
    ups = []
    for u in upstream:
        marker = run_dir / u / ".done.json"
        ups.append(read_json(marker)["fingerprint"] if marker.exists() else None)
    return fingerprint(name, {s: d[s] for s in sections}, d["model"], ups)


def stage_status(run_dir: str | Path, cfg: RunConfig) -> dict[str, str]:
    """For each stage: 'done' (marker matches), 'stale' (marker from other inputs) or 'todo'."""
    run_dir = Path(run_dir)
    out = {}
    for name in STAGES:
        marker = run_dir / name / ".done.json"
        if not marker.exists():
            out[name] = "todo"
        else:
            out[name] = "done" if read_json(marker)["fingerprint"] == _fingerprint(run_dir, cfg, name) else "stale"
    return out


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("mathcircuits", "torch", "transformers", "transformer-lens", "peft", "datasets", "circuitsvis", "plotly"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def run_pipeline(
    cfg: RunConfig,
    run_dir: str | Path,
    only: list[str] | None = None,
    force: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = log.info,
) -> dict[str, Any]:
    """Run every stage (or ``only`` those) whose inputs changed; return each stage's summary."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / "config.yaml"
    if cfg_path.exists() and not force:
        import yaml

        # compare the model section only: the rest of an older config may use keys this version no longer has
        old_model = (yaml.safe_load(cfg_path.read_text()) or {}).get("model") or {}
        if {k: old_model.get(k, v) for k, v in cfg.to_dict()["model"].items()} != cfg.to_dict()["model"]:
            raise ValueError(
                f"{run_dir} holds a run of model {old_model.get('source')!r} ({old_model}), not {cfg.model.source!r}. Fix: use another --out folder, or --force to overwrite."
            )
    cfg.save(cfg_path)
    write_json(run_dir / "versions.json", _versions())
    names = list(STAGES)
    if only:
        bad = [n for n in only if n not in STAGES]
        if bad:
            raise ValueError(f"unknown stages {bad}. Fix: use some of {names}.")
        names = [n for n in names if n in only]
    ctx = S.Context(run_dir, cfg, progress=progress, force=force)
    summaries: dict[str, Any] = {}
    for name in names:
        fn, _, upstream = STAGES[name]
        for u in upstream:
            if not (run_dir / u / ".done.json").exists():
                raise RuntimeError(f"stage {name!r} needs stage {u!r} first. Fix: run `mathcircuits {u}` (or `mathcircuits run`).")
            if u not in names and read_json(run_dir / u / ".done.json")["fingerprint"] != _fingerprint(run_dir, cfg, u):
                raise RuntimeError(f"stage {name!r} needs stage {u!r}, whose outputs are stale for this config. Fix: run `mathcircuits run` (or `mathcircuits {u}` first).")
        fp = _fingerprint(run_dir, cfg, name)
        marker = run_dir / name / ".done.json"
        if not force and marker.exists() and read_json(marker)["fingerprint"] == fp:
            echo(f"[{name}] up to date, skipped")
            summaries[name] = read_json(marker)["summary"]
            continue
        echo(f"[{name}] running ...")
        t0 = time.perf_counter()
        summary = fn(ctx)
        summary["seconds"] = round(time.perf_counter() - t0, 1)
        S.write_done(marker, fp, summary)
        summaries[name] = summary
        echo(f"[{name}] done in {summary['seconds']} s")
    return summaries
