"""The ``mathcircuits`` command: run the whole pipeline or one stage over a run folder.

Examples::

    mathcircuits run --config configs/default.yaml --out runs/default
    mathcircuits identify --out runs/default      # one stage (its upstream stages must be done)
    mathcircuits config --show                    # every setting with its type, range and default

Sub-commands and their help come from the study registry (:func:`mathcircuits.pipeline.stages`). A bad input
ends as ``error: <problem>. Fix: <fix>`` with exit code 2; a failure no input explains as
``error: internal error in stage <name>: <message>`` with exit code 3 (traceback in the run folder's
``logs/``); Ctrl-C as ``interrupted; rerun to resume`` with exit code 130 (finished stages are kept).
Arguments are parsed before torch and the model libraries are imported, so ``--help``, ``--version`` and a
usage error answer at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from mathcircuits._errors import FixableError
from mathcircuits._version import __version__
from mathcircuits.pipeline.registry import stages

if TYPE_CHECKING:
    from mathcircuits.pipeline import RunConfig

__all__ = ["build_parser", "main"]

EXIT_ERROR = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


#: Folder arguments (dest, as usage names it): read as text, refused when empty (``Path("")`` is the current
#: directory), then made paths by :func:`_folders`.
_FOLDERS = (("out", "--out"), ("run_a", "run_a"), ("run_b", "run_b"))


def _folders(parser: _Parser, args: argparse.Namespace) -> None:
    for dest, flag in _FOLDERS:
        text = getattr(args, dest, None)
        if not isinstance(text, str):
            continue  # not this command's, or its default
        if not text.strip():
            parser.refuse(
                f"argument {flag}: an empty folder name would make the current directory the folder",
                "name a folder, e.g. runs/default",
                command=args.command,
            )
        setattr(args, dest, Path(text))


def _add_common(p: argparse.ArgumentParser, runs: bool = True) -> None:
    """--config, --out and --model; with ``runs``, also the options of a command that runs stages."""
    p.add_argument(
        "--config",
        type=Path,
        help="YAML or TOML run configuration (default: the run folder's config.yaml, else the defaults)",
    )
    p.add_argument("--out", default=Path("runs/default"), help="run folder (default: runs/default)")
    p.add_argument(
        "--model",
        help="override model.source: embedded (SmolLM2-135M-Instruct), gemma3-270m (Gemma 3 270M base), "
        "tiny-llama, tiny-gpt2, a folder, .gguf, hub id",
    )
    if runs:
        p.add_argument("--force", action="store_true", help="re-run stages even when their inputs are unchanged")
        p.add_argument("--quiet", action="store_true", help="no progress bars")


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors in the house form ``error: <problem>. Fix: <fix>`` (exit code 2)."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed = super().parse_args(args, namespace)
        _folders(self, parsed)  # sub-parsers are reached through parse_known_args: the check runs once, here
        return parsed

    def error(self, message: str) -> NoReturn:  # argparse's own messages, which name no fix
        self.refuse(message, f"see `{self.prog} --help`")

    def refuse(self, problem: str, fix: str, command: str | None = None) -> NoReturn:
        prog = f"{self.prog} {command}" if command else self.prog
        self.exit(2, f"error: {prog}: {problem}. Fix: {fix}.\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; one sub-command per registered stage, with the registry's help line."""
    parser = _Parser(
        prog="mathcircuits",
        description="Find, explain and fine-tune the circuits LLMs use for arithmetic (Zhang et al., ICML 2024).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("run", help="run every stage (skipping those already done with the same inputs)")
    _add_common(p)
    p.add_argument(
        "--only",
        nargs="+",
        metavar="STAGE",
        choices=list(every := stages()),
        help=f"run only these stages, in pipeline order: {', '.join(every)}",
    )
    for stage in every.values():
        upstream = f" (needs: {', '.join(stage.reads)})" if stage.reads else ""
        sp = sub.add_parser(
            stage.name,
            help=stage.help,
            description=f"{stage.help}. Reads config sections: {', '.join(stage.settings)}{upstream}.",
        )
        _add_common(sp)
    s = sub.add_parser("status", help="show which stages of a run folder are done, stale, to do or off")
    _add_common(s, runs=False)
    cm = sub.add_parser(
        "compare-models",
        help="two run folders of one config on two models: claims side by side, one comparison page",
        description="Compare two finished run folders made with the same config on two models (e.g. --model "
        "embedded and --model gemma3-270m): claims card side by side, key heads by relative depth, knockout, "
        "attention roles and MLPs; a difference is marked only where the intervals separate.",
    )
    cm.add_argument("run_a", help="model A's run folder")
    cm.add_argument("run_b", help="model B's run folder")
    cm.add_argument("--out", required=True, help="output folder (comparison.html, tables, figures)")
    c = sub.add_parser("config", help="print the configuration (all defaults, or a file merged over them)")
    c.add_argument("--config", type=Path, help="a config file to merge over the defaults")
    c.add_argument(
        "--show", action="store_true", help="print every setting with its type, range or choices, default and help"
    )
    return parser


def _load_config(args: argparse.Namespace) -> RunConfig:
    from mathcircuits.pipeline import ConfigError, RunConfig, RunPaths

    out = getattr(args, "out", None)
    if args.config is not None:
        cfg = RunConfig.load(args.config)
    elif out is not None and RunPaths(out).identity.is_file():  # a run folder: its own config, which must be there
        own = RunPaths(out).config
        if not own.is_file() or not own.read_text().strip():
            raise ConfigError(
                f"{out} holds a run, but its config.yaml is {'missing' if not own.is_file() else 'empty'}, so the "
                "settings its results were made with are unknown. ",
                "pass --config with the run's config (or restore config.yaml), or use a new --out folder.",
            )
        cfg = RunConfig.load(own)
    elif out is not None and (out / "config.yaml").is_file():
        cfg = RunConfig.load(out / "config.yaml")
    else:
        cfg = RunConfig()
    if getattr(args, "model", None):
        try:
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, source=args.model))
        except ConfigError as err:
            raise ConfigError(f"--model: {err}") from err
    return cfg


def _message(err: BaseException, out: Path | None = None) -> str:
    """``<problem>. Fix: <fix>`` for an input or OS error (the toolkit's errors already say their fix)."""
    from mathcircuits._files import DISK_FULL

    if isinstance(err, OSError) and err.errno in DISK_FULL:
        where = err.filename or (f"a file in {out}" if out is not None else "a file")
        return (
            f"disk full: could not write {where} ({err.strerror}). Fix: free space on that disk (df -h), raise "
            "the file-size limit if one is set (ulimit -f), or use an --out folder on another disk."
        )
    if isinstance(err, FixableError):
        return " ".join(str(err).split())
    if isinstance(err, OSError) and err.strerror:
        text = f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    else:
        text = str(err).strip() or type(err).__name__
    return f"{' '.join(text.split()).rstrip('.')}. Fix: check the path and its permissions."


def _no_run_folder(out: Path) -> str:
    """Why ``status`` has nothing to show for ``out``, and how to start a run there."""
    what = "is a file, not a run folder" if out.exists() else "does not exist, so no run has started there"
    return (
        f"{out} {what}. Fix: start a run with `mathcircuits run --config configs/default.yaml --out {out}`, "
        "or pass --out the folder of an existing run."
    )


def _compare_models(args: argparse.Namespace) -> int:
    from mathcircuits.pipeline.compare_models import compare_model_runs

    cmp = compare_model_runs(args.run_a, args.run_b, args.out)
    print(repr(cmp))
    print(cmp.claims_table().to_string(index=False))
    sep = cmp.separated()
    print("separated differences: " + ("; ".join(sep) if sep else "none"))
    print(f"comparison page: {args.out / 'comparison.html'}")
    return 0


def _run(args: argparse.Namespace) -> int:
    # imported here, after the arguments are parsed: these bring in torch and the model libraries
    import yaml

    from mathcircuits.pipeline import RunPaths, run_pipeline
    from mathcircuits.pipeline.config import render_config
    from mathcircuits.pipeline.run import done_summary, stage_status

    if args.command == "compare-models":
        return _compare_models(args)
    cfg = _load_config(args)
    if args.command == "config":
        print(render_config(cfg) if args.show else yaml.safe_dump(cfg.to_dict(), sort_keys=False), end="")
        return 0
    if args.command == "status":
        every, paths = stages(), RunPaths(args.out)
        for name, state in stage_status(args.out, cfg).items():
            study = every[name]
            if study.switch is not None and not cfg.section(study.switch).enabled:  # done, but it did nothing
                print(f"{name:<10} off ({study.switch}.enabled is false)")
                continue
            note = study.progress(paths) if study.progress is not None else ""  # a resumable study's own count
            if state.state == "done":  # what it cost, as its marker recorded it
                done = done_summary(args.out, name)
                note = ", ".join(x for x in (f"{done.seconds:.1f} s", str(done.peak_memory or ""), note) if x)
            print(f"{name:<10} {state}{f'  ({note})' if note else ''}")  # done / todo / stale (why)
        return 0
    only = args.only if args.command == "run" else [args.command]
    t0 = time.perf_counter()
    summaries = run_pipeline(cfg, args.out, only=only, force=args.force, progress=not args.quiet, echo=print)
    for name, summary in summaries.items():
        print(f"== {name}")
        print(summary)
    print(f"run directory: {args.out}  ({time.perf_counter() - t0:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Returns the exit code: 0 done, 2 error, 3 internal error, 130 interrupted.
    """
    args = build_parser().parse_args(argv)
    if args.command == "status" and not args.out.is_dir():  # answered before the model libraries load
        print(f"error: {_no_run_folder(args.out)}", file=sys.stderr)
        return EXIT_ERROR
    try:  # the model libraries load here, after parsing (seconds): Ctrl-C meanwhile is a clean stop too
        from mathcircuits.pipeline.run import InternalError, is_input_error
    except KeyboardInterrupt:
        print("interrupted; rerun to resume", file=sys.stderr)
        return EXIT_INTERRUPTED

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("interrupted; rerun to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except InternalError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as err:
        if is_input_error(err):  # ConfigError, RunFolderError, IntegrityError, library input checks, OS errors
            print(f"error: {_message(err, getattr(args, 'out', None))}", file=sys.stderr)
            return EXIT_ERROR
        print("".join(traceback.format_exception(err)), file=sys.stderr, end="")
        print(
            f"error: internal error: {' '.join(str(err).split()) or type(err).__name__}\n  this is a bug in "
            "mathcircuits or a dependency (traceback above).",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
