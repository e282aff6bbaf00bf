"""Arguments checked at the call, from the function's own annotations.

Every public function (each name in a public package's ``__all__``) is wrapped once, where its package exports
it (:func:`check_exports`), by :func:`checked`: before the body runs, each given argument is checked against its
annotation with beartype (``int`` where a float belongs is taken, as PEP 484 says) and against the bounds an
``Annotated[int, Bounds(...)]`` declares. A violation is an :class:`ArgumentTypeError` or an
:class:`ArgumentRangeError` naming the function, the argument, what was given and what is expected, so a
``steps="5"`` fails at the door instead of as a ``TypeError`` three modules down.

Defaults are not checked (a ``None`` default means "the config's"), and an annotation that cannot be resolved
or checked at run time leaves that one argument unchecked (:data:`UNCHECKED` says which and why). The wrapper
replaces the function in its defining module too, so ``inspect.signature``, pickling by name and monkeypatching
the module see one object.
"""

from __future__ import annotations

import builtins
import collections.abc
import dataclasses
import functools
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Literal, TypeVar, Union

from mathcircuits._errors import FixableTypeError, FixableValueError

__all__: list[str] = []  # internal: a user catches mathcircuits.FixableError (or TypeError / ValueError)

F = TypeVar("F", bound=Callable[..., Any])

#: (function's qualified name, argument) → why it is not checked at the call
UNCHECKED: dict[tuple[str, str], str] = {}


@dataclasses.dataclass(frozen=True)
class Bounds:
    """A numeric range declared once, with the reason for it: ``Annotated[int, Bounds(ge=1, le=1000, why=...)]``.

    ``why`` says what an over-large value would cost (or why a small one means nothing); the refusal quotes it.
    """

    ge: int | float | None = None
    gt: int | float | None = None
    le: int | float | None = None
    lt: int | float | None = None
    why: str = ""

    def text(self) -> str:
        """The range in words: ``>= 1 and <= 1000``."""
        ops = ((self.ge, ">="), (self.gt, ">"), (self.le, "<="), (self.lt, "<"))
        return " and ".join(f"{op} {v}" for v, op in ops if v is not None)

    def holds(self, value: Any) -> bool:
        """Whether a number lies in the range (anything else is the type check's business)."""
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return True
        return not (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        )


class _ArgumentError:
    """The function and argument a refusal names, as fields (code never reads them out of the message)."""

    function: str
    argument: str

    def __reduce__(self):  # type: ignore[no-untyped-def]  # keep the fields across a worker process
        rebuild, args = super().__reduce__()[:2]  # type: ignore[misc]
        return rebuild, args, {"function": self.function, "argument": self.argument}


class ArgumentTypeError(_ArgumentError, FixableTypeError):
    """An argument whose type is not the one its annotation declares."""


class ArgumentRangeError(_ArgumentError, FixableValueError):
    """A number outside the bounds its annotation declares."""


class ArgumentChoiceError(_ArgumentError, FixableValueError, TypeError):
    """A value of the right kind that is none of the choices a ``Literal`` lists (a ``ValueError``, as the function's
    own check of the choice raised, and a ``TypeError``, as beartype does)."""


def kind_of(value: Any) -> str:
    """What a value is, in a message: ``None``, ``a list of 3 dict``, ``an empty list``, ``a KeyComponents``."""
    if value is None:
        return "None"
    name = type(value).__name__
    if isinstance(value, (list, tuple)):
        if not value:
            return f"an empty {name}"
        inner = sorted({type(v).__name__ for v in value})
        return f"a {name} of {len(value)} {'/'.join(inner)}"
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


def _short(value: Any, width: int = 40) -> str:
    try:
        text = " ".join(repr(value).split())
    except Exception:  # noqa: BLE001  # a value whose repr fails is still named by its kind
        return "?"
    return text if len(text) <= width else text[: width - 1] + "…"


#: how a message names an expected class, where its name alone would not tell a notebook user what to pass
_PHRASES = {
    "PairSet": "prompt pairs (a PairSet from generate_pairs)",
    "PreTrainedTokenizerBase": "a Hugging Face tokenizer",
    "PreTrainedTokenizerFast": "a Hugging Face tokenizer",
    "Tokenizer": "a Hugging Face tokenizer",
}
_SEQUENCES = {list, tuple, collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection}


def expected(hint: Any) -> str:
    """An annotation in words: ``a PairSet``, ``a whole number``, ``one of 'add', 'sub'``, ``a list of int``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return expected(args[0])
    if hint is None or hint is type(None):
        return "None"
    if hint is Any or hint is object:
        return "anything"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(expected(a) for a in args)
    if hint is int:
        return "a whole number (int)"
    if hint is float:
        return "a number (float)"
    if hint is bool:
        return "True or False"
    if hint is str:
        return "a text (str)"
    if origin is tuple and args and args[-1] is not Ellipsis:
        return "a tuple (" + ", ".join(expected(a) for a in args) + ")"
    if origin in _SEQUENCES or hint in _SEQUENCES:
        inner = "" if not args else " of " + expected(args[0]).removeprefix("a ").removeprefix("an ")
        return f"a list{inner}"
    if origin in (dict, collections.abc.Mapping):
        return "a mapping"
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return "a callable"
    if isinstance(hint, type):
        name = hint.__name__
        return _PHRASES.get(name, f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}")
    return str(hint).replace("typing.", "")


def _is_a_choice(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the type of a choice the hint's ``Literal`` lists (a misspelt choice, not a wrong kind)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _is_a_choice(value, args[0])
    if origin is Literal:
        return any(type(value) is type(a) for a in args)
    if origin in (Union, types.UnionType):
        return any(_is_a_choice(value, a) for a in args)
    return False


@dataclasses.dataclass(frozen=True)
class _Each:
    """Bounds on every item of a sequence argument (``Sequence[Annotated[int, Bounds(...)]]``)."""

    bounds: Bounds


def _bounds_of(hint: Any) -> Bounds | _Each | None:
    """The bounds an annotation declares (in ``Annotated[...]``, also inside ``... | None``, or on the items of a
    sequence)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return next((m for m in hint.__metadata__ if isinstance(m, Bounds)), None)
    if origin in (Union, types.UnionType):
        return next((b for a in args if (b := _bounds_of(a)) is not None), None)
    if origin in _SEQUENCES and len(args) == 1 and isinstance(inner := _bounds_of(args[0]), Bounds):
        return _Each(inner)
    return None


class _Names(dict):  # type: ignore[type-arg]
    """Where an annotation's names are looked up: the function's module, then any loaded module of the package
    (names imported only under ``TYPE_CHECKING``), then the libraries those names come from."""

    def __init__(self, home: Mapping[str, Any]) -> None:
        super().__init__()
        self.home = home

    def __missing__(self, name: str) -> Any:
        if name in self.home:
            return self.home[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        for mod in (typing, collections.abc):
            if hasattr(mod, name):
                return getattr(mod, name)
        found = {
            id(obj): obj
            for modname, mod in list(sys.modules.items())
            if modname.startswith("mathcircuits") and mod is not None and (obj := vars(mod).get(name)) is not None
        }
        if len(found) == 1:
            return next(iter(found.values()))
        if found:  # two modules mean different things by this name: which one the annotation means is unknown
            raise KeyError(name)
        for lib in ("torch", "transformers", "datasets", "numpy", "pandas", "plotly.graph_objects"):
            if lib in sys.modules and hasattr(sys.modules[lib], name):
                return getattr(sys.modules[lib], name)
        raise KeyError(name)


def _resolve(fn: Callable[..., Any], name: str, ann: Any) -> Any:
    if not isinstance(ann, str):
        return ann
    home = inspect.unwrap(fn).__globals__  # the module that wrote the annotation, not a wrapper's
    return eval(ann, {"__builtins__": builtins}, _Names(home))  # noqa: S307  # the function's own text


@dataclasses.dataclass
class _Plan:
    """How to check one function's arguments: each parameter's hint and bounds, resolved on the first call."""

    positional: list[str]
    names: set[str]
    hints: dict[str, tuple[Any, Bounds | _Each | None, Callable[[Any], Any]]]
    defaults: dict[str, Any]
    var_positional: str | None
    var_keyword: str | None


def own_checks(fn: F, *params: str) -> F:
    """Declare that ``fn`` checks ``params`` itself, with a message that says more than their annotation (what a
    tokenizer string names, why a model without a head cannot be read): the call leaves those to it."""
    fn.__own_checks__ = frozenset(params)  # type: ignore[attr-defined]  # copied onto the wrapper by functools.wraps
    return fn


class _BoolForNumber(Exception):
    """``True``/``False`` given where a number belongs (``bool`` is an ``int`` to Python and to beartype)."""


def _numbers_of(hint: Any) -> set[Any]:
    """The plain types ``int``, ``float`` and ``bool`` (and ``Any``/``object``) a hint admits, through unions."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _numbers_of(args[0])
    if origin in (Union, types.UnionType):
        return set().union(*(_numbers_of(a) for a in args))
    return {hint} & {int, float, bool, Any, object}


def _tester(hint: Any) -> Callable[[Any], Any]:
    """A function of one argument, checked by beartype against ``hint``: it raises on a violation (a decorated call
    costs about a microsecond; ``beartype.door.is_bearable`` looks its checker up anew at every call). A count or a
    number refuses ``True``/``False`` (a flag given where a count belongs), unless the hint admits ``bool``."""
    from beartype import beartype

    def probe(value: Any) -> None:
        return None

    probe.__annotations__ = {"value": hint}
    checked_probe = beartype(conf=_conf())(probe)
    numbers = _numbers_of(hint)
    if not numbers & {int, float} or numbers & {bool, Any, object}:
        return checked_probe

    def no_flag(value: Any) -> None:
        if isinstance(value, bool):
            raise _BoolForNumber
        checked_probe(value)

    return no_flag


def _plan(fn: Callable[..., Any]) -> _Plan:
    sig = inspect.signature(fn)
    own = getattr(fn, "__own_checks__", frozenset())
    hints: dict[str, tuple[Any, Bounds | _Each | None, Callable[[Any], Any]]] = {}
    positional, var_pos, var_kw = [], None, None
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(p.name)
        elif p.kind is p.VAR_POSITIONAL:
            var_pos = p.name
        elif p.kind is p.VAR_KEYWORD:
            var_kw = p.name
        if p.annotation is inspect.Parameter.empty or p.name in own:
            continue
        try:
            hint = _resolve(fn, p.name, p.annotation)
            tester = _tester(hint)  # or says why beartype cannot check it
        except Exception as err:  # noqa: BLE001  # an annotation beartype cannot check leaves the argument free
            UNCHECKED[(fn.__qualname__, p.name)] = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
            continue
        hints[p.name] = (hint, _bounds_of(hint), tester)
    defaults = {p.name: p.default for p in sig.parameters.values() if p.default is not inspect.Parameter.empty}
    return _Plan(positional, set(sig.parameters), hints, defaults, var_pos, var_kw)


@functools.cache
def _conf() -> Any:
    from beartype import BeartypeConf

    return BeartypeConf(is_pep484_tower=True)  # an int where a float belongs, as PEP 484 says


def _check(
    fn_name: str, name: str, value: Any, hint: Any, bounds: Bounds | _Each | None, tester: Callable[[Any], Any]
) -> None:
    from beartype.roar import BeartypeCallHintViolation

    try:
        tester(value)
        ok = True
    except (BeartypeCallHintViolation, _BoolForNumber):
        ok = False
    if not ok:
        kind = ArgumentChoiceError if _is_a_choice(value, hint) else ArgumentTypeError
        err = kind(
            f"{fn_name}: {name} must be {expected(hint)}, got {kind_of(value)} ({_short(value)}). ",
            f"pass {expected(hint)} as {name} (help({fn_name}) says what it is)",
        )
        err.function, err.argument = fn_name, name
        raise err
    if isinstance(bounds, _Each):
        bad = next((v for v in value if not bounds.bounds.holds(v)), None)
        if bad is not None:
            why = f" ({bounds.bounds.why})" if bounds.bounds.why else ""
            err = ArgumentRangeError(
                f"{fn_name}: {name} holds {_short(bad)}, out of range{why}. ",
                f"use values {bounds.bounds.text()}",
            )
            err.function, err.argument = fn_name, name
            raise err
    elif bounds is not None and not bounds.holds(value):
        why = f" ({bounds.why})" if bounds.why else ""
        err = ArgumentRangeError(
            f"{fn_name}: {name}={_short(value)} is out of range{why}. ", f"use a value {bounds.text()}"
        )
        err.function, err.argument = fn_name, name
        raise err


def checked(fn: F) -> F:
    """``fn`` with its given arguments checked against its annotations at every call (idempotent)."""
    if getattr(fn, "__mc_checked__", False):
        return fn
    plan: list[_Plan] = []
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not plan:
            plan.append(_plan(fn))
        p = plan[0]
        hints, defaults = p.hints, p.defaults
        for arg_name, value in zip(p.positional, args):
            if arg_name in hints and not (arg_name in defaults and value is defaults[arg_name]):
                _check(name, arg_name, value, *hints[arg_name])
        if p.var_positional in hints:
            for value in args[len(p.positional) :]:
                _check(name, f"*{p.var_positional}", value, *hints[p.var_positional])  # type: ignore[index]
        for arg_name, value in kwargs.items():
            if arg_name in hints and arg_name not in (p.var_positional, p.var_keyword):
                if not (arg_name in defaults and value is defaults[arg_name]):
                    _check(name, arg_name, value, *hints[arg_name])
            elif p.var_keyword in hints and arg_name not in p.names:
                _check(name, arg_name, value, *hints[p.var_keyword])  # type: ignore[index]
        return fn(*args, **kwargs)

    call.__mc_checked__ = True  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


def exported(value: Any) -> Any:
    """A package's exported ``value``: a function of the toolkit wrapped with :func:`checked`, also in the module
    that defines it (so both names are one object); anything else as it is."""
    if not isinstance(value, types.FunctionType) or not value.__module__.startswith("mathcircuits"):
        return value
    wrapped = checked(value)
    home = sys.modules.get(value.__module__)
    if home is not None and getattr(home, value.__name__, None) is value:
        setattr(home, value.__name__, wrapped)
    return wrapped


def check_exports(namespace: MutableMapping[str, Any]) -> None:
    """Wrap every function a package exports (its ``__all__``) with :func:`checked` (:func:`exported`). Called at
    the end of each public package's ``__init__``."""
    for export in namespace.get("__all__", ()):
        if export in namespace:
            namespace[export] = exported(namespace[export])
