"""Timing in rounds, for the benchmark scripts that compare several ways of one computation.

Each way is called once to warm up, then the ways are called in turn, round after round, so that a change of load
falls on all of them alike; a ratio is taken between two ways of the same round, and the median over the rounds is
reported. ``bench_sparse.py`` reports CPU time, ``bench_split_kv.py`` wall time (its rows differ in threads).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from collections.abc import Callable

Runs = dict[str, list[dict[str, float]]]


def timed(fn: Callable[[], object]) -> dict[str, float]:
    """One call of ``fn`` without autograd: its wall and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        fn()
    return {"seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}


def machine(threads: int, cpus: int | None, load_before: tuple[float, ...]) -> dict[str, object]:
    """What a report says of the machine it ran on: versions, threads, the CPU's capability, the load around it."""
    return {"torch": torch.__version__, "python": platform.python_version(), "threads": threads, "cpus": cpus,
            "processor": platform.processor() or platform.machine(),
            "capability": torch.backends.cpu.get_cpu_capability(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def round_robin(calls: dict[str, Callable[[], object]], repeats: int) -> Runs:
    """A warm-up call of each, then ``repeats`` rounds of one call of each in turn."""
    for fn in calls.values():
        timed(fn)
    runs: Runs = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            runs[name].append(timed(fn))
    return runs


def ratios(runs: Runs, base: str, *, key: str) -> dict[str, float]:
    """``base``'s time (``key``: "seconds" or "cpu_seconds") over each other row's in the same round, the median."""
    return {row: statistics.median(a[key] / b[key] for a, b in zip(runs[base], r, strict=True))
            for row, r in runs.items() if row != base}
