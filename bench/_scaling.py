"""Timing that tells how a query would scale with cores (issue 18), for the benchmark scripts.

A run is timed three ways at once: wall time, CPU time of the whole process (every thread: Polars'
pool and dpframe's) and CPU time of the calling thread alone (``time.thread_time``). Polars and
dpframe's thread pool work off the calling thread, so the last is the *serial* part: what more cores
cannot shorten. On P cores a run takes at least ``serial + (CPU − serial)/P`` — :func:`projected`, an
estimate (perfect scaling of the parallel part, no memory-bandwidth limit), printed next to measured
ratios so that a 2-core run says how far a 16-core one could go. On a loaded machine wall times
inflate; CPU times much less.

Standard library only (the scripts import numpy/polars themselves).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def cores() -> str:
    """Usable cores, the machine's cores and the load average (each report prints it)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"cores: {usable} usable of {os.cpu_count()}; load average {load}"


def usable_cores() -> int:
    """The number of cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass(frozen=True)
class Timing:
    """Medians over the runs, in seconds."""

    wall: float
    cpu: float
    serial: float

    def projected(self, cores: int) -> float:
        """Lower bound of the wall time on ``cores`` cores: serial + (CPU − serial)/cores."""
        return self.serial + max(self.cpu - self.serial, 0.0) / cores


def timed(fn: Callable[[], Any], runs: int, warmup: int = 1) -> Timing:
    """Median wall, process-CPU and calling-thread-CPU seconds of ``runs`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    wall, cpu, serial = [], [], []
    for _ in range(max(runs, 1)):
        w, c, t = time.perf_counter(), time.process_time(), time.thread_time()
        fn()
        serial.append(time.thread_time() - t)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return Timing(statistics.median(wall), statistics.median(cpu), statistics.median(serial))


def scaling_columns(ours: Timing, plain: Timing, floor: float = 0.0) -> list[str]:
    """Table cells: wall ms (ours, plain), wall ratio, CPU ratio, serial ms, projected ratio at 16 cores."""
    def ratio(a: float, b: float) -> str:
        return f"{a / max(b, floor, 1e-9):.2f}×"

    return [f"{ours.wall * 1e3:.0f}", f"{plain.wall * 1e3:.0f}", ratio(ours.wall, plain.wall),
            ratio(ours.cpu, plain.cpu), f"{ours.serial * 1e3:.0f}",
            ratio(ours.projected(16), plain.projected(16))]


SCALING_HEADERS = ["dpframe ms", "plain ms", "ratio (wall)", "ratio (CPU)", "dpframe serial ms",
                   "ratio at 16 cores (projected)"]
