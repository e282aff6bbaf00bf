"""Dependency versions: the ranges we compute exactly under, and the one shim a version needs.

A release of HF ``transformers`` or TransformerLens 4 can change what a fast path computes without raising.
``transformers 5.24`` did: decoder layers hand attention the KV cache as ``cache``, while TransformerLens 4.3's
attention bridge reads ``past_key_values``, so it skipped the cache update and prefix-cached logits were off by up
to 3.8 on tiny Llama, with no warning. Hence :data:`SUPPORTED` (the ranges the suite passed with, refused outside
by :func:`check_versions` before a run writes a file) and :func:`install_cache_alias` (the cache under the old
name too; :mod:`mathcircuits.models.forward.integrity` verifies its effect on the user's model).
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from typing import Any

import torch
from packaging.version import Version
from transformer_lens.model_bridge import TransformerBridge

from mathcircuits._errors import FixableError

__all__ = [
    "UnsupportedVersionError",
]


class UnsupportedVersionError(FixableError, RuntimeError):
    """An installed dependency lies outside the range mathcircuits was tested with."""


@dataclass(frozen=True)
class VersionRange:
    """Releases ``lowest ≤ v < below`` of one distribution, or any of several such intervals.

    ``also``: further ``(lowest, below)`` intervals the suite passed with (TransformerLens 3.9 is the second test
    environment, ``scripts/test-tl3.sh``).
    """

    lowest: str
    below: str
    also: tuple[tuple[str, str], ...] = ()

    def _intervals(self) -> tuple[tuple[str, str], ...]:
        return ((self.lowest, self.below), *self.also)

    def __contains__(self, version: str) -> bool:
        v = Version(version).release  # local builds (torch 2.13.0+cpu) compare by their release
        return any(Version(lo).release <= v < Version(hi).release for lo, hi in self._intervals())

    def __str__(self) -> str:
        return " or ".join(f">={lo},<{hi}" for lo, hi in self._intervals())


SUPPORTED: dict[str, VersionRange] = {
    "transformers": VersionRange("4.57", "5.25"),
    "transformer-lens": VersionRange("4.3", "4.4", also=(("3.9", "3.10"),)),
    "torch": VersionRange("2.2", "2.15"),
    "peft": VersionRange("0.13", "0.22"),
}
"""Distribution → the releases the suite passed with. ``pyproject.toml`` states the same bounds."""

CACHE_KWARG_SINCE = "5.24"
"""From this transformers release on, decoder layers pass the KV cache to attention as ``cache=``."""

_ALIAS_FLAG = "_mathcircuits_cache_alias"
ENV_SKIP = "MATHCIRCUITS_ALLOW_UNTESTED_VERSIONS"
"""Set to 1 to run outside :data:`SUPPORTED` anyway (for ``scripts/check-latest.sh``; the run-time checks stay on)."""


def installed_versions(names: tuple[str, ...] = ("mathcircuits", *SUPPORTED, "datasets", "lm_eval")) -> dict[str, str]:
    """Installed version of each distribution (``"not installed"`` when absent)."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def check_versions() -> dict[str, str]:
    """Refuse installed versions outside :data:`SUPPORTED` (unless ``MATHCIRCUITS_ALLOW_UNTESTED_VERSIONS=1``).

    Returns the installed versions of the checked distributions.
    """
    found = installed_versions(tuple(SUPPORTED))
    bad = [
        f"{name} {v} (supported {SUPPORTED[name]})"
        for name, v in found.items()
        if v != "not installed" and v not in SUPPORTED[name]
    ]
    if bad and os.environ.get(ENV_SKIP) != "1":
        raise UnsupportedVersionError(
            f"installed {', '.join(bad)}: mathcircuits has not been tested with this release, and a new release "
            "has changed what its fast paths compute before (transformers 5.24 renamed the KV-cache argument). ",
            "install the locked versions (bash scripts/setup.sh, or pip install -r requirements.lock), "
            f"or set {ENV_SKIP}=1 to run anyway with the run-time checks (fast_paths stays verified).",
        )
    return found


def _alias_cache(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if kwargs.get("cache") is not None and kwargs.get("past_key_values") is None:
        return args, {**kwargs, "past_key_values": kwargs["cache"]}
    return None


def install_cache_alias(bridge: TransformerBridge) -> TransformerBridge:
    """Let the bridge's attention see the KV cache under ``past_key_values`` when HF passes it as ``cache``.

    Idempotent (a flag on the bridge). Components that hand the call on to HF's own attention keep ``cache`` as
    well, so they update the cache exactly once, as before.
    """
    if getattr(bridge, _ALIAS_FLAG, False):
        return bridge
    for block in getattr(bridge, "blocks", []):
        attn = getattr(block, "attn", None)
        if isinstance(attn, torch.nn.Module):
            attn.register_forward_pre_hook(_alias_cache, with_kwargs=True)
    setattr(bridge, _ALIAS_FLAG, True)
    return bridge
