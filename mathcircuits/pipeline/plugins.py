"""Studies from outside the package: registered by a call or found through the ``mathcircuits.studies`` entry points.

A user's package adds a study with ``register_study(MY_STUDY)`` (a notebook, a script) or by declaring it::

    [project.entry-points."mathcircuits.studies"]
    mine = "my_package.study:MY_STUDY"

Entry points are read once, on first need (the run config's sections, the registry). This module is the
lowest of the pipeline: the config loader reads the sections a study declares from here, the registry
(:mod:`mathcircuits.pipeline.registry`) the studies themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

from mathcircuits._errors import FixableValueError

__all__ = [
    "StudyError",
    "register_study",
    "unregister_study",
]

ENTRY_POINT_GROUP = "mathcircuits.studies"


class StudyError(FixableValueError):
    """A study cannot be registered (a name taken, a record of the wrong kind); the message says how to fix it."""


@runtime_checkable
class _Registrable(Protocol):
    """What this module reads of a study record (:class:`~mathcircuits.pipeline.study.Study`)."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> Mapping[str, type]: ...


@runtime_checkable
class SettingsSection(Protocol):
    """A config section a study declares: a (frozen) dataclass of settings."""

    __dataclass_fields__: dict


_REGISTERED: dict[str, _Registrable] = {}
_LOADED = False


def _check(study: object, where: str) -> _Registrable:
    name = getattr(study, "name", None)
    config = getattr(study, "config", None)
    if (
        not isinstance(name, str)
        or not name.isidentifier()
        or not isinstance(config, Mapping)
        or not callable(getattr(study, "code", None))
    ):
        raise StudyError(
            f"{where} is a {type(study).__name__}, not a study record. ",
            "register a mathcircuits.pipeline.Study (name, help, settings, reads, code).",
        )
    return study  # type: ignore[return-value]


def register_study(study: object, replace: bool = False) -> None:
    """Add ``study`` (a :class:`~mathcircuits.pipeline.Study`) to the registry, after the built-in studies, in the
    order registered.

    A name already registered is refused unless ``replace``; a built-in study's name is refused by the registry.
    """
    study = _check(study, f"register_study({study!r})")
    if study.name in _REGISTERED and not replace and _REGISTERED[study.name] is not study:
        raise StudyError(
            f"a study named {study.name!r} is registered already. ", "give yours another name, or pass replace=True."
        )
    _REGISTERED[study.name] = study


def unregister_study(name: str) -> None:
    """Remove a study registered by :func:`register_study` (tests, notebooks); an unknown name is ignored."""
    _REGISTERED.pop(name, None)


def _load_entry_points() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            study = ep.load()
        except Exception as err:  # a user's package that fails to import: say which, and why
            raise StudyError(
                f"the study entry point {ep.name!r} ({ep.value}) cannot be loaded: {type(err).__name__}: {err}. ",
                "fix or uninstall the package that declares it.",
            ) from err
        if _check(study, f"entry point {ep.name!r} ({ep.value})").name not in _REGISTERED:
            _REGISTERED[study.name] = study


def registered() -> list[_Registrable]:
    """The studies registered from outside the package (entry points first read on the first call)."""
    _load_entry_points()
    return list(_REGISTERED.values())


def extra_sections() -> dict[str, type]:
    """The config sections the registered studies declare: section name → config class."""
    out: dict[str, type] = {}
    for study in registered():
        for section, cls in study.config.items():
            if section in out and out[section] is not cls:
                raise StudyError(
                    f"two studies declare the config section {section!r} with different classes. ",
                    "give one of them another section name.",
                )
            out[section] = cls
    return out
