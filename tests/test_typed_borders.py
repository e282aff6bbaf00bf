"""No untyped mapping crosses a package border.

Walks every name in the ``__all__`` of ``mathcircuits``, ``mathcircuits.cli`` and each public subpackage: the
parameters and result of functions, the fields of classes and the signatures of the public methods,
properties, class and static methods they define, and the annotations of exported constants and type aliases.
A ``dict``/``Mapping`` whose values are ``Any`` or ``object``, or one without arguments, is an offender.
"""

from __future__ import annotations

import collections
import collections.abc
import enum
import importlib
import inspect
import pkgutil
import sys
import types
import typing
from typing import Any

import mathcircuits

_MAPPINGS = {
    dict,
    collections.abc.Mapping,
    collections.abc.MutableMapping,
    collections.defaultdict,
    collections.OrderedDict,
    types.MappingProxyType,
}
_BARE = {dict, typing.Dict, typing.Mapping, typing.MutableMapping, collections.abc.Mapping}
_BARE |= {collections.abc.MutableMapping}
_UNTYPED = (Any, object)
_METHODS = {"__init__", "__call__", "__new__"}


def _public_modules() -> list[str]:
    names = ["mathcircuits", "mathcircuits.cli"]
    for info in pkgutil.walk_packages(mathcircuits.__path__, "mathcircuits."):
        if info.ispkg and not any(p.startswith("_") for p in info.name.split(".")):
            names.append(info.name)
    return names


def _offences(tp: object, seen: frozenset[int] = frozenset()) -> list[str]:
    """What in annotation ``tp`` is an untyped mapping (texts), recursing through its arguments."""
    if id(tp) in seen or isinstance(tp, (str, typing.ForwardRef)):  # a recursive alias refers back to itself
        return []
    seen = seen | {id(tp)}
    if isinstance(tp, typing.TypeVar):
        return [o for b in (tp.__bound__, *tp.__constraints__) if b is not None for o in _offences(b, seen)]
    if tp in _BARE:
        return [f"bare {tp!r}"]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _offences(args[0], seen)
    out: list[str] = []
    if origin in _MAPPINGS:
        if len(args) < 2 or any(args[-1] is u for u in _UNTYPED):
            out.append(repr(tp))
    for arg in args:
        if isinstance(arg, (list, tuple)):  # Callable[[params], result]
            for a in arg:
                out += _offences(a, seen)
        else:
            out += _offences(arg, seen)
    return out


_PUBLIC: dict[str, object] = {}  # every public name, for annotations imported only under TYPE_CHECKING


def _hints(obj: object) -> dict[str, object]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except NameError:
        home = vars(sys.modules[obj.__module__]) if getattr(obj, "__module__", None) in sys.modules else {}
        return typing.get_type_hints(obj, localns={**_PUBLIC, **home}, include_extras=True)


def _ours(obj: object) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("mathcircuits")


def _callable_hints(where: str, fn: object, found: list[str]) -> None:
    fn = inspect.unwrap(fn) if callable(fn) else fn
    try:
        hints = _hints(fn)
    except Exception as e:  # noqa: BLE001 - an annotation that cannot be resolved is itself a finding
        found.append(f"{where}: annotations do not resolve ({e})")
        return
    for name, tp in hints.items():
        for o in _offences(tp):
            found.append(f"{where} {'-> ' if name == 'return' else name + ': '}{o}")


def _class_hints(where: str, cls: type, found: list[str]) -> None:
    if issubclass(cls, enum.Enum):
        return
    own = {n for k in cls.__mro__ if _ours(k) for n in vars(k).get("__annotations__", {}) if not n.startswith("_")}
    try:
        hints = _hints(cls)
    except Exception as e:  # noqa: BLE001
        found.append(f"{where}: field annotations do not resolve ({e})")
        hints = {}
    for name in sorted(own & hints.keys()):
        for o in _offences(hints[name]):
            found.append(f"{where}.{name}: {o}")
    done: set[str] = set()
    for k in cls.__mro__:
        if not _ours(k):
            continue
        for name, attr in vars(k).items():
            if name in done or (name.startswith("_") and name not in _METHODS):
                continue
            done.add(name)
            if isinstance(attr, property):
                fns = [attr.fget]
            elif isinstance(attr, (classmethod, staticmethod)):
                fns = [attr.__func__]
            elif inspect.isfunction(attr):
                fns = [attr]
            else:
                continue
            for fn in fns:
                if fn is not None and _ours(fn):
                    _callable_hints(f"{where}.{name}", fn, found)


def _value_hint(module: str, name: str, value: object, found: list[str]) -> None:
    """A constant's declared type: found in the module of the package that defines it."""
    for modname, mod in list(sys.modules.items()):
        if not (modname == module or modname.startswith(module + ".")) or getattr(mod, name, None) is not value:
            continue
        if name in getattr(mod, "__annotations__", {}):
            try:
                tp = typing.get_type_hints(mod, include_extras=True).get(name)
            except Exception:  # noqa: BLE001 - other names of the module may not resolve; this one is read alone
                tp = eval(mod.__annotations__[name], vars(mod)) if isinstance(mod.__annotations__[name], str) else None
            for o in _offences(tp):
                found.append(f"{module}.{name}: {o}")
            return


def untyped_mappings() -> list[str]:
    found: list[str] = []
    modules = [importlib.import_module(m) for m in _public_modules()]
    for mod in modules:
        _PUBLIC.update({n: getattr(mod, n) for n in getattr(mod, "__all__", ()) if n not in _PUBLIC})
    for name, mod in list(sys.modules.items()):  # then the internal aliases (a Literal a section field names)
        if name.startswith("mathcircuits."):
            _PUBLIC.update({n: v for n, v in vars(mod).items() if not n.startswith("__") and n not in _PUBLIC})
    for mod in modules:
        module = mod.__name__
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            where = f"{module}.{name}"
            if inspect.isclass(obj):
                if _ours(obj):
                    _class_hints(where, obj, found)
            elif inspect.isfunction(inspect.unwrap(obj)) if callable(obj) else False:
                _callable_hints(where, obj, found)
            elif typing.get_origin(obj) is not None or isinstance(obj, typing.TypeVar):  # a type alias
                found += [f"{where} (alias): {o}" for o in _offences(obj)]
            else:
                _value_hint(module, name, obj, found)
    return sorted(set(found))


def test_offences_are_found():
    """The walker sees through unions, containers, Annotated and aliases; typed mappings pass."""
    assert _offences(dict) and _offences(typing.Mapping) and _offences(dict[str, Any])
    assert _offences(list[typing.Optional[typing.Mapping[str, object]]])
    assert _offences(typing.Annotated[tuple[int, dict[str, Any]], "x"])
    assert _offences(typing.Callable[[dict[str, Any]], int])
    assert not _offences(dict[str, int]) and not _offences(typing.Mapping[str, list[float]] | None)
    from mathcircuits import Encoded, JSONObject

    assert not _offences(JSONObject) and not _offences(Encoded)


def test_no_untyped_mapping_crosses_a_package_border():
    found = untyped_mappings()
    assert not found, f"{len(found)} public annotations carry an untyped mapping:\n" + "\n".join(found)
