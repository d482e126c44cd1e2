"""Provides the curves a metric's plot draws, decided from a MetricStore: live and past runs."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from ddptui.core.metrics.sample import MetricSample
from ddptui.core.metrics.store import MetricStore


class CurveRole(Enum):
    """What a curve is, so the plot can colour it; the store decided which ones there are."""

    RANK = "rank"  # the one rank that prints the metric
    LOW = "low"  # the lowest value across ranks at each step
    HIGH = "high"  # the highest
    TOTAL = "total"  # a throughput summed over ranks
    PAST = "past"  # the same metric in a past run


@dataclass(frozen=True, slots=True)
class Curve:
    """(step, value) points by step, finite values only (a NaN has no place on a plot)."""

    label: str
    role: CurveRole
    points: tuple[tuple[int, float], ...]


def _finite(points: Iterable[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    return tuple((step, value) for step, value in points if math.isfinite(value))


def live_curves(store: MetricStore, name: str) -> list[Curve]:
    """A metric's curves: the summed throughput; else min and max across ranks where several
    print it; else the one rank's values."""
    view = store.view(name)
    if view.throughput:
        return [
            Curve(f"sum of {len(view.ranks)} ranks", CurveRole.TOTAL, _finite(store.total(name)))
        ]
    if len(view.ranks) > 1:
        spread = store.spread(name)
        low = _finite((s.step, s.low) for s in spread)
        high = _finite((s.step, s.high) for s in spread)
        return [
            Curve(f"max of {len(view.ranks)} ranks", CurveRole.HIGH, high),
            Curve(f"min of {len(view.ranks)} ranks", CurveRole.LOW, low),
        ]
    if view.ranks:
        rank = view.ranks[0]
        return [Curve(f"rank {rank}", CurveRole.RANK, _finite(store.series(name, rank)))]
    return []


class PastRun:
    """A past run's metrics, read once from its metrics file, for an overlay by step."""

    def __init__(self, run_id: str, samples: Iterable[MetricSample]) -> None:
        self.run_id = run_id
        self.store = MetricStore()
        self.store.add_all(samples)

    def curve(self, name: str) -> Curve | None:
        """The metric as the live plot's main line would be: the summed throughput, else the
        lowest rank that printed it; None if the run did not print it."""
        view = self.store.view(name)
        if not view.ranks:
            return None
        if view.throughput:
            points = _finite(self.store.total(name))
        else:
            points = _finite(self.store.series(name, view.ranks[0]))
        return Curve(f"run {self.run_id}", CurveRole.PAST, points) if points else None
