"""Typed, self-describing config dataclasses: checked when built, printable as a schema.

Every config (``GenerationConfig``, ``SFTConfig``, ...) is a frozen dataclass whose type hints *are* the
schema. :func:`check_fields`, called from ``__post_init__``, checks each value against its hint with the
codec's lenient walker (:func:`~mathcircuits._codec.decode_value`) and against the range in the field's
metadata (:func:`setting`), so a typo fails when the config is built, not three stages later. Lists are
accepted where tuples belong (YAML has no tuples), whole numbers where floats belong, and number strings
such as ``"1e-4"`` (PyYAML reads ``1e-4`` without a dot as a string) where floats belong; a float must be
finite; a string is never taken for a list. A *value type* (a class with ``parse(text)`` whose ``str``
writes the text back, such as a fine-tuning ``Mode``) is written as its text.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, TypeVar, Union

from mathcircuits._checks import Bounds, kind_of
from mathcircuits._codec import FieldError, decode_value, is_value_type, shown
from mathcircuits._errors import FixableError, FixableTypeError, FixableValueError

__all__: list[str] = []

T = TypeVar("T")


class ConfigError(FixableError, ValueError):
    """A configuration value is invalid; the message names the key, the problem and the fix."""


Bound = int | float | None  # not `float | None`: beartype (under pytest) does not take an int for a float


def setting(
    default: Any,
    help: str = "",
    ge: Bound = None,
    gt: Bound = None,
    le: Bound = None,
    lt: Bound = None,
    why: str = "",
) -> Any:
    """A dataclass field with a help line and an optional numeric range.

    ``default`` must be immutable (tuples, not lists); ``help`` is shown by ``mathcircuits config --show``;
    ``ge, gt, le, lt`` are checked by :func:`check_fields`; ``why`` says what the bounds guard against (an upper
    bound's cost), quoted when a value is refused.
    """
    bounds = {k: v for k, v in {"ge": ge, "gt": gt, "le": le, "lt": lt}.items() if v is not None}
    meta = {"help": help, **bounds, **({"why": why} if why else {})}
    return dataclasses.field(default=default, metadata=meta)


def plain(value: Any) -> Any:
    """A config value as plain YAML/JSON data: dataclasses as dicts, value types as their text, tuples as lists."""
    if is_value_type(type(value)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def type_name(hint: Any) -> str:
    """A short readable name of a type hint (``int``, ``list of str``, ``one of 'a', 'b'``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " or ".join(type_name(a) for a in inner) + (" or null" if len(inner) < len(args) else "")
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {type_name(args[0])}"
        return "[" + ", ".join(type_name(a) for a in args) + "]"
    if origin is dict:
        return "mapping"
    if is_value_type(hint):
        return getattr(hint, "__name__", str(hint)).lower()
    return getattr(hint, "__name__", str(hint))


_PLAIN = {
    int: "a whole number, e.g. 4",
    float: "a finite number, e.g. 0.5 or 1.0e-4",
    bool: "true or false",
    str: "a text value",
}


def _hint_fix(hint: Any, value: Any = None) -> str:
    if hint in _PLAIN:
        return f"give {_PLAIN[hint]}"
    name = type_name(hint)
    if name.startswith("list of"):
        if isinstance(value, (list, tuple)):
            elem = typing.get_args(hint)[0]
            return f"make every element {_PLAIN.get(elem, type_name(elem))}"
        return f"write a YAML list ({name}), e.g. [a, b], not a single value"
    return f"give {name}"


def _checked(f: dataclasses.Field, hint: Any, value: Any) -> Any:
    """``value`` decoded leniently by ``hint`` (list → tuple, int → float) and range-checked; else ConfigError."""
    try:
        conv = decode_value(value, hint, f.name, strict=False)
    except FieldError as err:
        if err.reason is not None:  # a value type's own message says what its text should be
            raise ConfigError(f"{f.name}={shown(value)}: {err.reason}") from None
        raise ConfigError(f"{f.name}={shown(value)} is not {type_name(hint)}. ", f"{_hint_fix(hint, value)}.") from None
    _check_range(f, conv)
    return conv


def check_fields(obj: Any) -> None:
    """Check (and normalise) every field of a frozen config dataclass against its type hint and range.

    Lists become tuples and ints floats, in place; :class:`ConfigError` names the first bad field.
    """
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        conv = _checked(f, hints[f.name], value)
        if conv is not value:
            object.__setattr__(obj, f.name, conv)


def _bounds(meta: Any) -> Bounds:
    return Bounds(**{k: meta[k] for k in ("ge", "gt", "le", "lt", "why") if k in meta})


def _check_range(f: dataclasses.Field, value: Any) -> None:
    bounds = _bounds(f.metadata)
    if not bounds.holds(value):
        why = f" ({bounds.why})" if bounds.why else ""
        raise ConfigError(f"{f.name}={shown(value)} is out of range{why}. ", f"use a value {bounds.text()}.")


def _range_text(meta: Any) -> str:
    return _bounds(meta).text()


def from_dict(cls: type[T], values: Any, hidden: tuple[str, ...] = ()) -> T:
    """Build config ``cls`` from a mapping, refusing unknown (or ``hidden``) keys.

    ``values`` None means all defaults; ``hidden`` fields exist on ``cls`` but may not be set from a file.
    """
    values = {} if values is None else values
    if not isinstance(values, dict):
        raise ConfigError(f"expected a mapping of settings, got {shown(values)}. ", "write `key: value` lines.")
    known = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in hidden]  # type: ignore[arg-type]
    bad = [k for k in values if k not in known]
    if bad:
        raise ConfigError(f"unknown keys {bad}. ", f"use only {known}.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: _checked(fields[k], hints[k], v) for k, v in values.items()}  # before __init__'s own type check
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:  # a library config's own __post_init__ check
        raise ConfigError(str(err)) from err


def describe(cls: type, hidden: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """One row per settable field of ``cls``: name, type, range, default and help."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name in hidden:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append(
            {
                "name": f.name,
                "type": type_name(hints[f.name]),
                "range": _range_text(f.metadata),
                "default": repr(plain(default)),
                "help": f.metadata.get("help", ""),
            }
        )
    return rows


def project(obj: Any, cls: type[T], **changes: Any) -> T:
    """The fields of ``obj`` that ``cls`` has, as a ``cls`` (a pipeline section → its library config)."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    return cls(**{**{n: getattr(obj, n) for n in names}, **changes})


def expect(verb: str, name: str, value: Any, kinds: type | tuple[type, ...], wanted: str, fix: str) -> None:
    """Refuse an argument of the wrong kind with a ``TypeError`` that names the verb, the argument and the fix.

    The public verbs call this on what a notebook user passes, so a plausible wrong object (key heads where a
    circuit belongs, a list of dicts where pairs belong) fails at the door instead of deep inside.
    """
    if not isinstance(value, kinds):
        raise FixableTypeError(f"{verb}: {name} must be {wanted}, got {kind_of(value)}. ", f"{fix}.")


def expect_pairs(verb: str, name: str, value: Any, minimum: int = 1) -> None:
    """Refuse anything but prompt pairs (a ``PairSet`` of :func:`~mathcircuits.data.generate_pairs`; this layer
    sits below data/, so it knows the class by what it does), or fewer than ``minimum`` of them (a bootstrap over
    one pair has no spread)."""
    if not hasattr(value, "batches") or not hasattr(value, "select"):
        raise FixableTypeError(
            f"{verb}: {name} must be prompt pairs (a PairSet from generate_pairs), got {kind_of(value)}. ",
            "pass generate_pairs(...)'s result (rows you built: PairSet.from_rows(rows)).",
        )
    if len(value) < minimum:
        raise FixableValueError(
            f"{verb}: {name} has {len(value)} pair(s); its intervals need at least {minimum}. ", "pass more pairs."
        )


def given(**values: Any) -> dict[str, Any]:
    """The keyword settings a caller gave: those not None (a verb's ``None`` means "the config's")."""
    return {k: v for k, v in values.items() if v is not None}


def configured(verb: str, cls: type[T], config: T | None = None, **settings: Any) -> T:
    """The config a library verb runs with: ``config`` (None: ``cls``'s defaults) with ``settings`` replaced.

    A verb takes its config whole (the pipeline passes its section) and, for a notebook, any of the config's
    fields as keywords; the defaults and ranges are the config's alone, so the verb refuses what the config
    refuses (a negative threshold, ``n_boot=1``, ...) and names itself in the message.
    """
    base = cls() if config is None else config
    expect(verb, "config", base, cls, f"a {cls.__name__}", f"pass a {cls.__name__} (or None) and settings as keywords")
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    unknown = [k for k in settings if k not in names]
    if unknown:
        raise FixableTypeError(f"{verb}: unknown settings {unknown}. ", f"use fields of {cls.__name__}: {names}.")
    if not settings:
        return base
    try:
        return dataclasses.replace(base, **settings)  # type: ignore[type-var]
    except FixableError as err:  # the config's own check: its problem and fix, said by the verb
        raise ConfigError(f"{verb}: {err.problem}. ", err.fix) from err
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{verb}: {' '.join(str(err).split())}") from err
