"""Provides the benchmarks' statistics (median, percentile, runs interleaved) and what this
process has used (peak RSS, CPU time).

The machine is a shared 2-core box, so figures are medians of repeated runs and every
comparison is against the alternative measured in the same run (interleaved A, B, A, B ...).
"""

from __future__ import annotations

import resource
import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    """This process's CPU time so far (user + system, all its threads; not its children)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def interleaved(reps: int, runners: dict[str, Callable[[int], T]]) -> dict[str, list[T]]:
    """Run each runner `reps` times, alternating A, B, A, B ... so drift hits all alike."""
    out: dict[str, list[T]] = {name: [] for name in runners}
    for i in range(reps):
        for name, run in runners.items():
            out[name].append(run(i))
            print(f"  [{i + 1}/{reps}] {name}: {_short(out[name][-1])}", flush=True)
    return out


def _short(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(v)}" for k, v in list(value.items())[:6])
    return str(value)
