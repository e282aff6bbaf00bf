"""Encoding of dataclass fields by their declared types, for :mod:`mathcircuits._io`.

Each field is encoded by its annotation (tuples as lists, named tuples such as ``Head`` as the list of
their fields, nested dataclasses as dicts, tensors as CPU tensors, enums as their values, a value type with
``parse`` — such as a fine-tuning ``Mode`` — as its text) and decoded back by the same annotation, which
checks it: an unknown, missing or mistyped field raises :class:`FieldError`. A record may write a nested value
flat (``FLAT``: an interval as ``x``, ``x_low``, ``x_high`` beside its other fields, as files have it). The same walker
(:func:`decode_value`) reads config values leniently, for :mod:`mathcircuits._schema`. Fields annotated
``Any`` are encoded losslessly (tuples marked ``__tuple__``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import reprlib
import types
import typing
from typing import Any, ForwardRef, Literal, TypeVar, Union

import torch
from jaxtyping import AbstractArray

from mathcircuits._errors import problem_of

__all__ = [
    "Encoded",
    "EncodedValue",
]

T = TypeVar("T")

_ENC = ForwardRef("EncodedValue", module=__name__)  # recursive: resolved in this module wherever it is used
#: A value as saved (:func:`encode_fields`): JSON values, CPU tensors, tuples not yet written as lists.
EncodedValue = str | int | float | bool | None | torch.Tensor | list[_ENC] | tuple[_ENC, ...] | dict[str, _ENC]
Encoded = dict[str, EncodedValue]  # a saved value's dict: what to_dict gives and from_dict takes


class FieldError(ValueError):
    """The fields of a saved value do not fit its class (unknown, missing or mistyped field).

    ``reason``: where a value type (``parse``) refused the text, its own message.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


# ----------------------------------------------------------------------------- flat fields


@dataclasses.dataclass(frozen=True)
class Fixed:
    """A part of a flat-written value that is not saved: it is always ``value`` (e.g. an interval's method)."""

    value: Any


#: How a record writes a nested value flat: the nested value's part → the record's saved key, or :class:`Fixed`.
#: A part left out takes its default. A key may be the record's own field too (an interval's ``n`` and the
#: record's ``n``): it is written once, from the record's field, and read into both. ``SAVED_ORDER`` (optional):
#: the saved keys in the order files have them.
FlatSpec = dict[str, str | Fixed]


def _flat(cls: type) -> dict[str, FlatSpec]:
    """A record's ``FLAT``: field → :data:`FlatSpec`, for the fields it writes flat (none by default)."""
    return getattr(cls, "FLAT", None) or {}


def _encode_flat(obj: Any, hints: dict[str, Any]) -> Encoded:
    """``obj``'s fields with each ``FLAT`` field written as its parts' keys, in place of the field."""
    flat = _flat(type(obj))
    out: Encoded = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name not in flat:
            out[f.name] = _encode(value, hints.get(f.name, Any))
            continue
        part_hints = _hints(type(value))
        for part, key in flat[f.name].items():
            if isinstance(key, str) and key not in out:
                out[key] = _encode(getattr(value, part), part_hints.get(part, Any))
    order = getattr(type(obj), "SAVED_ORDER", ())  # the keys' order in files written before the record nested them
    return {k: out[k] for k in order} | out if order else out


def _decode_flat(cls: type, fields: Encoded, where: str, strict: bool) -> Encoded:
    """``fields`` as saved with each ``FLAT`` field's parts gathered back into the nested value.

    The parts' keys that are not also fields of ``cls`` are removed; a missing key raises :class:`FieldError`.
    """
    flat = _flat(cls)
    if not flat:
        return fields
    hints = _hints(cls)
    own = {f.name for f in dataclasses.fields(cls)}
    out = dict(fields)
    used: set[str] = set()
    for name, spec in flat.items():
        tp = hints[name]
        part_hints = _hints(tp)
        keys = [k for k in spec.values() if isinstance(k, str)]
        missing = [k for k in keys if k not in fields]
        if missing:
            raise FieldError(f"{where or 'it'} lacks field(s) {missing} (the parts of its {name!r})")
        parts = {
            part: key.value if isinstance(key, Fixed) else _decode(fields[key], part_hints.get(part, Any), key, strict)
            for part, key in spec.items()
        }
        out[name] = tp(**parts)
        used.update(keys)
    for key in used - own:
        out.pop(key, None)
    return out


# ----------------------------------------------------------------------------- encoding by declared type

_NONE = type(None)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation that cannot be resolved: treat it as Any (values stay as they are)
        return {}


def _is_tensor_type(tp: Any) -> bool:
    return isinstance(tp, type) and (issubclass(tp, torch.Tensor) or issubclass(tp, AbstractArray))


def is_value_type(tp: Any) -> bool:
    """Whether ``tp`` is a value type written as its text: it has ``parse(text)`` and ``str()`` gives the text
    back (named tuples such as ``Head`` have ``parse`` too but are written by their fields)."""
    return isinstance(tp, type) and callable(getattr(tp, "parse", None)) and not issubclass(tp, tuple)


def _is_named_tuple(tp: Any) -> bool:
    """A ``NamedTuple`` class (such as ``Head``): saved as the list of its fields, rebuilt as the class."""
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _container_type(tp: Any, value: Any) -> Any:
    """For a union annotation, the member that describes ``value``'s container (else ``tp``)."""
    if not _is_union(tp):
        return tp
    for arg in typing.get_args(tp):
        origin = typing.get_origin(arg) or arg
        if isinstance(origin, type) and isinstance(value, origin):
            return arg
    return Any


def _to_plain(value: Any) -> Any:
    """Lossless encoding of an untyped (``Any``) value: tuples are marked, tensors copied to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, enum.Enum):
        return value.value
    if is_value_type(type(value)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode_fields(value)
    if isinstance(value, tuple):
        return {"__tuple__": [_to_plain(v) for v in value]}
    if isinstance(value, list):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    return value


def from_plain(value: Any) -> Any:
    """Undo the JSON-safe encoding of plain values: ``{"__tuple__": [...]}`` becomes a tuple again, recursively."""
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(from_plain(v) for v in value["__tuple__"])
        return {k: from_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_plain(v) for v in value]
    return value


def _encode(value: Any, tp: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, enum.Enum):
        return value.value
    if is_value_type(type(value)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode_fields(value)
    tp = _container_type(tp, value)
    if tp is Any or tp is object:
        return _to_plain(value)
    args = typing.get_args(tp)
    if isinstance(value, (tuple, list)):
        if typing.get_origin(tp) is tuple and args and args[-1] is not Ellipsis and len(args) == len(value):
            return [_encode(v, a) for v, a in zip(value, args)]
        elem = args[0] if args else Any
        return [_encode(v, elem) for v in value]
    if isinstance(value, dict):
        vt = args[1] if len(args) == 2 else Any
        return {k: _encode(v, vt) for k, v in value.items()}
    return value


_REPR = reprlib.Repr()  # a value in a message is cut short: a YAML alias bomb's repr would take minutes and GBs
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 2, 8, 8, 8, 8
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 100, 100, 40


def shown(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to a bounded length and depth, for error messages."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: Any) -> str:
    return shown(value, 60)


def _decode(value: Any, tp: Any, where: str, strict: bool) -> Any:
    """``value`` (as saved, or as YAML gave it) turned into the declared type ``tp``; :class:`FieldError` if it
    does not fit. Lenient (``strict=False``) differs only in taking number text for a float and refusing a
    non-finite one (PyYAML reads ``1e-4`` as text; a saved measurement may be NaN)."""
    if tp is Any or tp is object:
        return from_plain(value) if strict else value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        if value is None and _NONE in args:
            return None
        records = [a for a in args if dataclasses.is_dataclass(a)]
        if records and isinstance(value, dict):  # e.g. ModelSpec | dict: a saved dict is the record's fields
            return _decode(value, records[0], where, strict)
        for arg in args:
            if arg is _NONE:
                continue
            try:
                return _decode(value, arg, where, strict)
            except FieldError as err:
                if err.reason is not None:  # text a value type refused: its own message says what is wrong
                    raise
        raise FieldError(f"field {where!r} is {_show(value)}, which is not a {tp}")
    if origin is Literal:
        if value in args and (not isinstance(value, bool) or bool in map(type, args)):
            return value
        raise FieldError(f"field {where!r} is {_show(value)}, not one of {args}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise FieldError(f"field {where!r} is {_show(value)}, not one of {[m.value for m in tp]}") from None
    if is_value_type(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, str):
            raise FieldError(f"field {where!r} is {_show(value)}, which is not a {tp.__name__} (text)")
        try:
            return tp.parse(value)
        except (TypeError, ValueError) as err:
            raise FieldError(
                f"field {where!r} is {_show(value)}, which is not a {tp.__name__}: {problem_of(err)}", reason=str(err)
            ) from None
    if _is_tensor_type(tp):
        if not isinstance(value, torch.Tensor):
            raise FieldError(f"field {where!r} should be a tensor but is a {type(value).__name__}")
        return value
    if _is_named_tuple(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, (list, tuple)) or len(value) != len(tp._fields):
            raise FieldError(
                f"field {where!r} should be a {tp.__name__} ({len(tp._fields)} items) but is {_show(value)}"
            )
        hints = _hints(tp)
        return tp(*(_decode(v, hints.get(n, Any), f"{where}.{n}", strict) for n, v in zip(tp._fields, value)))
    if origin in (tuple, list) or tp in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise FieldError(f"field {where!r} should be a list but is {_show(value)}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise FieldError(f"field {where!r} should have {len(args)} items but has {len(value)}")
            items = [_decode(v, a, f"{where}[{i}]", strict) for i, (v, a) in enumerate(zip(value, args))]
        else:
            elem = args[0] if args else Any
            items = [_decode(v, elem, f"{where}[{i}]", strict) for i, v in enumerate(value)]
        return tuple(items) if (origin or tp) is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise FieldError(f"field {where!r} should be a dict but is {_show(value)}")
        kt, vt = args if len(args) == 2 else (Any, Any)
        out = {}
        for k, v in value.items():
            key = int(k) if kt is int and isinstance(k, str) and k.lstrip("-").isdigit() else k
            out[key] = _decode(v, vt, f"{where}[{k!r}]", strict)
        return out
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise FieldError(f"field {where!r} should be a {tp.__name__} (a dict of its fields) but is {_show(value)}")
        from_dict = getattr(tp, "from_dict", None)
        try:
            # a nested value class may read itself in from_dict(d); saved results nest as plain fields
            return (
                from_dict(value)
                if callable(from_dict) and not getattr(tp, "NESTS_AS_FIELDS", False)
                else decode_fields(tp, value, where, strict)
            )
        except FieldError as err:
            raise FieldError(f"in field {where!r} ({tp.__name__}): {err}") from None
    if tp is float:
        if not strict and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (strict or math.isfinite(value)):
            raise FieldError(f"field {where!r} should be a {'' if strict else 'finite '}number but is {_show(value)}")
        return float(value)
    if tp in (int, bool, str):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise FieldError(f"field {where!r} should be of type {tp.__name__} but is {_show(value)}")
        return value
    return value


def decode_value(value: Any, tp: Any, where: str = "value", strict: bool = True) -> Any:
    """One plain value (as JSON or YAML holds it) turned into the declared type ``tp``, checked on the way.

    The one walker over annotations: saved results decode strictly, config values (``strict=False``, what a
    person wrote) leniently: number text for a float, and only finite floats. :class:`FieldError` names
    ``where`` if the value does not fit.
    """
    return _decode(value, tp, where, strict)


def encode_fields(obj: Any) -> Encoded:
    """The fields of dataclass ``obj`` as plain values and CPU tensors (nested dataclasses as dicts)."""
    hints = _hints(type(obj))
    if _flat(type(obj)):
        return _encode_flat(obj, hints)
    return {f.name: _encode(getattr(obj, f.name), hints.get(f.name, Any)) for f in dataclasses.fields(obj)}


def decode_fields(cls: type[T], fields: Any, where: str = "", strict: bool = True) -> T:
    """Build ``cls`` from the dict :func:`encode_fields` made; every field must be there, and no other.

    ``where`` names ``fields`` in messages (e.g. ``"the model spec"``).
    """
    what = where or "it"
    if not isinstance(fields, dict):
        raise FieldError(f"{what} should be a dict of fields but is a {type(fields).__name__}")
    flat = _flat(cls)
    fields = _decode_flat(cls, fields, where, strict)
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    unknown = [k for k in fields if k not in names]
    missing = [n for n in names if n not in fields]
    if unknown:
        raise FieldError(f"{what} has unknown field(s) {unknown} (a {cls.__name__} has only {names})")
    if missing:
        raise FieldError(f"{what} lacks field(s) {missing} (a {cls.__name__} has {names})")
    hints = _hints(cls)
    kwargs = {n: fields[n] if n in flat else _decode(fields[n], hints.get(n, Any), n, strict) for n in names}
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, IndexError) as err:
        raise FieldError(f"{what} holds values a {cls.__name__} refuses: {problem_of(err)}") from None


def tensors_to_json(value: Any) -> Any:
    """Make tensors inside a nested value JSON-safe, recursively.

    Each tensor becomes ``{"__tensor__": nested list, "dtype": name, "shape": [...]}``; tuples become lists.
    """
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return {"__tensor__": value.tolist(), "dtype": dtype, "shape": list(value.shape)}
    if isinstance(value, dict):
        return {k: tensors_to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [tensors_to_json(v) for v in value]
    return value


def tensors_from_json(value: Any) -> Any:
    """Turn the ``__tensor__`` records written by :func:`tensors_to_json` back into tensors, recursively.

    Tensors come back on the CPU.
    """
    if isinstance(value, dict):
        if "__tensor__" in value and set(value) == {"__tensor__", "dtype", "shape"}:
            dtype = getattr(torch, str(value["dtype"]), None)
            if not isinstance(dtype, torch.dtype):
                raise FieldError(f"a tensor has the unknown dtype {value['dtype']!r}")
            return torch.tensor(value["__tensor__"], dtype=dtype).reshape(value["shape"])
        return {k: tensors_from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [tensors_from_json(v) for v in value]
    return value
