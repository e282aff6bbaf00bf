"""The numbers stage's results together, as the report and its figures take them (each one optional)."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.numbers.helix import HelixResult
from mathcircuits.numbers.neurons import NeuronResult
from mathcircuits.numbers.patch import HelixPatchResult
from mathcircuits.numbers.probes import ProbeResult
from mathcircuits.numbers.spectra import Spectrum

__all__ = ["NumberResults"]


@dataclass(frozen=True)
class NumberResults:
    """The numbers stage's results a report shows; every one is optional."""

    spectra: Spectrum | None = None
    logit_spectra: Spectrum | None = None
    probes: ProbeResult | None = None
    helix: HelixResult | None = None
    helix_patch: HelixPatchResult | None = None
    neurons: NeuronResult | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, n) is not None for n in self.__dataclass_fields__)
