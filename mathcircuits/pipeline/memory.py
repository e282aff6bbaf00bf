"""Peak memory of a piece of work, as every stage's summary reports it.

What is measured, and how:

* **CUDA** (the model has a block on a GPU): ``torch.cuda.max_memory_allocated`` after
  ``reset_peak_memory_stats``, minus what was allocated at the start, summed over the GPUs the model uses.
  That is the tensors' memory; the caching allocator's reserve and the CUDA context come on top.
* **CPU** (otherwise): the process's resident set size (RSS) above its value at the start. On Linux the
  kernel's high-water mark is reset at the start (``5`` written to ``/proc/self/clear_refs``) and read at
  the end (``VmHWM`` in ``/proc/self/status``): exact. Where that is not allowed, the peak is read from
  ``getrusage``'s ``ru_maxrss`` when the work raised the process's lifetime high-water mark (exact), else
  from a thread that samples the RSS every ``interval`` seconds (``psutil``; a peak shorter than the
  interval can be missed: ``exact=False``). RSS counts every allocation of the process, the other
  threads' included, and memory the allocator has not yet given back; it is the figure an
  out-of-memory kill looks at. A meter inside another keeps the outer one right (the inner reset is
  accounted for).

Usage::

    with MemoryMeter(cuda_devices(model)) as meter:
        path_patch(model, pairs)
    meter.peak                      # PeakMemory(bytes=..., how="cpu_rss" | "cuda_allocated", ...)
"""

from __future__ import annotations

import resource
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import psutil
import torch

from mathcircuits.models import devices_of
from mathcircuits.models.spec import Bridged

__all__ = [
    "MemoryHow",
    "MemoryMeter",
    "PeakMemory",
]

#: How a peak was measured: tensors allocated on CUDA devices, or the process's resident set size.
MemoryHow: TypeAlias = Literal["cuda_allocated", "cpu_rss"]


@dataclass(frozen=True)
class PeakMemory:
    """The most memory a piece of work held above what was held when it started.

    ``bytes``: the peak above the start; ``how``: what was measured (module docstring); ``devices``: where
    (``"cpu"``, or the CUDA devices, comma-separated); ``exact``: ``False`` when the CPU peak comes from
    sampling (a shorter spike can be missed).
    """

    bytes: int
    how: MemoryHow
    devices: str
    exact: bool

    def __str__(self) -> str:
        what = "CUDA allocated" if self.how == "cuda_allocated" else "RSS" + ("" if self.exact else ", sampled")
        return f"{self.bytes / 2**20:,.0f} MiB above the start ({what}, {self.devices})"


def cuda_devices(model: Bridged | None = None) -> list[torch.device]:
    """The CUDA devices the model's blocks run on (every visible one when ``model`` is ``None``); none without CUDA."""
    if not torch.cuda.is_available():
        return []
    if model is None:
        return [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    return [d for d in devices_of(model) if d.type == "cuda"]


def _max_rss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: kilobytes


def _reset_high_water_mark() -> bool:
    """Reset the kernel's peak-RSS counter of this process (Linux ≥ 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _high_water_mark() is not None
    except OSError:
        return False


def _high_water_mark() -> int | None:
    """``VmHWM`` of ``/proc/self/status`` in bytes (``None`` where there is no such file)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


_ACTIVE: list[MemoryMeter] = []  # meters inside one another: an inner reset must not hide the outer's peak


class MemoryMeter:
    """A context manager measuring the peak memory of its block (:class:`PeakMemory`, in ``.peak`` afterwards).

    Args:
        cuda: the CUDA devices to measure (:func:`cuda_devices`); none measures the process's RSS.
        interval: seconds between RSS samples on the CPU.
    """

    def __init__(self, cuda: Sequence[torch.device] = (), interval: float = 0.005) -> None:
        self.cuda = list(cuda)
        self.interval = interval
        self.peak: PeakMemory | None = None
        self._stop = threading.Event()
        self._sampled = 0

    def __enter__(self) -> MemoryMeter:
        if self.cuda:
            self._start = {}
            for d in self.cuda:
                torch.cuda.synchronize(d)
                torch.cuda.reset_peak_memory_stats(d)
                self._start[d] = torch.cuda.memory_allocated(d)
            return self
        self._proc = psutil.Process()
        self._rss0 = self._proc.memory_info().rss
        self._floor = self._rss0  # the highest RSS that inner meters' resets may have erased
        before = _high_water_mark() or 0
        for outer in _ACTIVE:  # the reset below erases the peak the outer meters have seen so far
            outer._floor = max(outer._floor, before)
        self._kernel = _reset_high_water_mark()
        if not self._kernel:
            self._maxrss0 = _max_rss()
            self._sampled = self._rss0
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        _ACTIVE.append(self)
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._sampled = max(self._sampled, self._proc.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        if self.cuda:
            used = 0
            for d in self.cuda:
                torch.cuda.synchronize(d)
                used += torch.cuda.max_memory_allocated(d) - self._start[d]
            self.peak = PeakMemory(max(used, 0), "cuda_allocated", ",".join(map(str, self.cuda)), True)
            return
        _ACTIVE.remove(self)
        if self._kernel:
            top, exact = max(_high_water_mark() or 0, self._floor), True
        else:
            self._stop.set()
            self._thread.join()
            self._sampled = max(self._sampled, self._proc.memory_info().rss)
            maxrss = _max_rss()
            exact = maxrss > self._maxrss0  # a new high-water mark: it was reached inside the block
            top = maxrss if exact else self._sampled
        for outer in _ACTIVE:
            outer._floor = max(outer._floor, top)
        self.peak = PeakMemory(max(top - self._rss0, 0), "cpu_rss", "cpu", exact)
