"""Template sets: prompts for arithmetic as data files, validated on load.

A template set is a YAML file in ``data_templates/`` (schema:
``data_templates/SCHEMA.md``). Each template has placeholders ``{A}``, ``{B}``
(operands), exactly one ``{OP}`` (the operator, which the counterfactual
replaces, Zhang et al. 2024 §3.1) and optional word-pool placeholders such as
``{name}``. Loading refuses unknown placeholders, missing pools, duplicate ids
and unknown operations, naming the file, the template and the fix.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from mathcircuits._errors import FixableError, FixableFileNotFoundError
from mathcircuits._files import StrictYAMLError, load_yaml

__all__ = [
    "Operation",
    "Template",
    "TemplateError",
    "TemplateSet",
    "default_template_dir",
    "load_templates",
]

Operation = Literal["add", "sub", "mul", "div", "pow"]
OPERATIONS: tuple[Operation, ...] = get_args(Operation)
#: an operation, or ``"all"``: every operation a run patched, pooled (e.g. the run folder's ``patching_all.pt``)
OperationOrAll = Operation | Literal["all"]
_OPERAND_SLOTS = ("A", "B", "OP")


class TemplateError(FixableError, ValueError):
    """A template file is malformed; the message names the file, the template and the fix."""


@dataclass(frozen=True)
class Template:
    id: str
    operation: Operation
    form: str
    text: str
    op: str
    cf_vocab: str
    set_name: str

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.text) if name is not None)

    @property
    def pools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for p in self.placeholders if p not in _OPERAND_SLOTS))


@dataclass(frozen=True)
class TemplateSet:
    name: str
    description: str
    templates: tuple[Template, ...]
    counterfactual_vocab: dict[str, tuple[str, ...]]
    word_pools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    fewshot_separator: str = "\n"
    fewshot_examples: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    path: str = ""

    def get(self, template_id: str) -> Template:
        for t in self.templates:
            if t.id == template_id:
                return t
        raise KeyError(
            f"template {template_id!r} is not in set {self.name!r}; its ids are {[t.id for t in self.templates]}."
        )


def default_template_dir() -> Path:
    """``data_templates/`` at the project root (beside the ``mathcircuits`` package).

    It may not exist in an installed package.
    """
    return Path(__file__).resolve().parents[2] / "data_templates"


def _fail(path: Path, where: str, problem: str, fix: str) -> TemplateError:
    return TemplateError(f"{path}: {where}: {problem}.", f"{fix}.")


def load_template_set(path: str | Path) -> TemplateSet:
    """Load and validate one template file (the format is in ``data_templates/SCHEMA.md``).

    Raises FileNotFoundError, or TemplateError naming the file, the template and the fix.
    """
    path = Path(path)
    if not path.exists():
        raise FixableFileNotFoundError(
            f"template file {path} does not exist. ", "give an existing file (data_templates/SCHEMA.md has the format)."
        )
    try:
        raw: Any = load_yaml(path.read_text())
    except StrictYAMLError as err:
        raise _fail(path, "file", err.problem, err.fix) from err
    except yaml.YAMLError as err:
        raise _fail(
            path, "file", f"is not valid YAML ({err})", "quote strings with special characters such as ^ @ % | > <"
        ) from err
    if not isinstance(raw, dict):
        raise _fail(path, "file", "top level is not a mapping", "follow data_templates/SCHEMA.md")
    if raw.get("schema_version") != 1:
        raise _fail(path, "schema_version", f"is {raw.get('schema_version')!r}, expected 1", "set schema_version: 1")
    for key in ("name", "templates", "counterfactual_vocab"):
        if key not in raw:
            raise _fail(path, key, "is missing", f"add a {key!r} entry (see data_templates/SCHEMA.md)")
    vocab = {k: tuple(str(x) for x in v) for k, v in (raw["counterfactual_vocab"] or {}).items()}
    pools = {k: tuple(str(x) for x in v) for k, v in (raw.get("word_pools") or {}).items()}
    for k, v in pools.items():
        if not v:
            raise _fail(path, f"word_pools.{k}", "is empty", "give it at least one word")
    fewshot = raw.get("fewshot") or {}
    try:
        examples = {op: tuple((int(a), int(b)) for a, b in ex) for op, ex in (fewshot.get("examples") or {}).items()}
    except (TypeError, ValueError) as err:
        raise _fail(
            path, "fewshot.examples", f"are not pairs of whole numbers ({err})", "write e.g. [[2, 4], [7, 1]]"
        ) from err
    templates: list[Template] = []
    seen: set[str] = set()
    for i, t in enumerate(raw["templates"] or []):
        tid = t.get("id", f"#{i}")
        where = f"template {tid!r}"
        for key in ("id", "operation", "text", "op", "cf_vocab"):
            if key not in t:
                raise _fail(path, where, f"has no {key!r}", f"add {key}: to the template")
        if tid in seen:
            raise _fail(path, where, "id is used twice", "give every template a unique id")
        seen.add(tid)
        if t["operation"] not in OPERATIONS:
            raise _fail(path, where, f"operation {t['operation']!r} is unknown", f"use one of {OPERATIONS}")
        tpl = Template(
            id=str(tid),
            operation=t["operation"],
            form=str(t.get("form", "equation")),
            text=str(t["text"]),
            op=str(t["op"]),
            cf_vocab=str(t["cf_vocab"]),
            set_name=str(raw["name"]),
        )
        try:
            names = tpl.placeholders
        except ValueError as err:
            raise _fail(
                path, where, f"text {tpl.text!r} has a broken placeholder ({err})", "use {A}, {B}, {OP} or {pool}"
            ) from err
        for slot in _OPERAND_SLOTS:
            n = names.count(slot)
            if n != 1:
                raise _fail(
                    path, where, f"text {tpl.text!r} has {n} {{{slot}}} placeholders", f"use {{{slot}}} exactly once"
                )
        for pool in tpl.pools:
            if pool not in pools:
                raise _fail(
                    path,
                    where,
                    f"placeholder {{{pool}}} has no word pool",
                    f"add word_pools.{pool}, or use one of {sorted(pools) or 'A, B, OP'}",
                )
        if tpl.cf_vocab not in vocab or not vocab[tpl.cf_vocab]:
            raise _fail(
                path,
                where,
                f"cf_vocab {tpl.cf_vocab!r} is not defined",
                f"use one of {sorted(vocab)} or add it to counterfactual_vocab",
            )
        if tpl.op in vocab[tpl.cf_vocab]:
            raise _fail(
                path,
                where,
                f"the operator {tpl.op!r} is in its own counterfactual vocabulary",
                "remove it from the vocabulary",
            )
        if tpl.text != tpl.text.strip():
            raise _fail(
                path,
                where,
                "text has leading or trailing spaces",
                "strip it; the generator adds the space before the answer",
            )
        templates.append(tpl)
    if not templates:
        raise _fail(path, "templates", "is empty", "add at least one template")
    return TemplateSet(
        name=str(raw["name"]),
        description=str(raw.get("description", "")),
        templates=tuple(templates),
        counterfactual_vocab=vocab,
        word_pools=pools,
        fewshot_separator=str(fewshot.get("separator", "\n")),
        fewshot_examples=examples,
        path=str(path),
    )


def load_templates(paths: list[str | Path] | str | Path | None = None) -> list[TemplateSet]:
    """Load template sets: the given files and folders, or every ``*.yaml`` in ``data_templates/``.

    A folder contributes its ``*.yaml`` files, sorted. TemplateError also when two files use the same id.
    """
    if paths is None:
        paths = [default_template_dir()]
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    if not files:
        raise FileNotFoundError(f"no template files (*.yaml) found in {paths}.")
    sets = [load_template_set(f) for f in files]
    ids: dict[str, str] = {}
    for s in sets:
        for t in s.templates:
            if t.id in ids:
                raise TemplateError(
                    f"template id {t.id!r} is in both {ids[t.id]} and {s.path}. ", "rename one of them."
                )
            ids[t.id] = s.path
    return sets
