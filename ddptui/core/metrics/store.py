"""Provides MetricStore: one run's metrics per name and rank, bounded, with what a panel shows."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from ddptui.core.metrics.names import Goal, goal, is_throughput
from ddptui.core.metrics.sample import MetricSample

MAX_POINTS = 2048  # per series; beyond, every other point goes (the whole run keeps its shape)
TREND_POINTS = 20  # the trend is read over this many recent values
FLAT = 0.02  # a change of the mean under 2% is flat


class Trend(Enum):
    """Where a metric is heading over its recent values."""

    DOWN = "down"
    UP = "up"
    FLAT = "flat"
    UNKNOWN = "unknown"  # too few values yet


@dataclass(frozen=True, slots=True)
class StepRange:
    """A metric at one step across the ranks that printed it there.

    `count` is how many values were printed at the step: a rank that printed it twice there
    (a line with no step of its own) counts twice.
    """

    step: int
    low: float
    high: float
    count: int


@dataclass(frozen=True, slots=True)
class MetricView:
    """What a panel shows beside a metric's plot; the store decides it, the panel draws it.

    `latest` and `best` are the job's: for throughput, summed over ranks; else the last
    value any rank printed and the best any printed (min or max as `goal` says).
    """

    name: str
    goal: Goal
    throughput: bool
    latest: float | None
    best: float | None
    trend: Trend
    ranks: tuple[int, ...]


def _thin(points: dict[int, float], limit: int) -> dict[int, float]:
    """Every other point, counted back from the last (kept): a bounded series of a whole run."""
    if len(points) <= limit:
        return points
    steps = sorted(points)
    kept = steps[len(steps) - 1 :: -2][::-1]
    return {step: points[step] for step in kept}


def _tidy(value: float) -> float:
    return float(f"{value:.12g}") if math.isfinite(value) else value


def trend_of(values: Iterable[float], tolerance: float = FLAT) -> Trend:
    """Down, up or flat: the mean of the later half against the earlier half's."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 4:
        return Trend.UNKNOWN
    half = len(finite) // 2
    before = sum(finite[:half]) / half
    after = sum(finite[half:]) / (len(finite) - half)
    scale = max(abs(before), abs(after))
    if scale == 0.0 or abs(after - before) <= tolerance * scale:
        return Trend.FLAT
    return Trend.UP if after > before else Trend.DOWN


@dataclass(slots=True)
class _Metric:
    """One metric's state; a throughput's job-wide figure is the sum of each rank's latest."""

    goal: Goal
    throughput: bool
    recent: deque[float]
    by_rank: dict[int, dict[int, float]] = field(default_factory=dict)
    spread: dict[int, list[float]] = field(default_factory=dict)  # step -> [low, high, count]
    rank_latest: dict[int, float] = field(default_factory=dict)
    totals: dict[int, float] = field(default_factory=dict)  # step -> summed throughput
    total_now: float = 0.0  # the sum of rank_latest, kept as it changes
    rank_sums: dict[int, list[float]] = field(default_factory=dict)  # rank -> [sum, count]
    latest: float | None = None
    best: float | None = None

    def better(self, value: float) -> None:
        if not math.isfinite(value) or self.goal is Goal.NONE:
            return
        best = self.best
        if best is None or (value < best if self.goal is Goal.LOWER else value > best):
            self.best = value


class MetricStore:
    """Every metric of one run, fed sample by sample (`add`), read by the metrics view, the
    wrong-number check's caller and the run's summary in history.

    Args:
        max_points: the most points kept per series (per rank, the spread, the totals).
        trend_points: how many recent values the trend is read over.
    """

    def __init__(self, max_points: int = MAX_POINTS, trend_points: int = TREND_POINTS) -> None:
        self.max_points = max_points
        self.trend_points = trend_points
        self._metrics: dict[str, _Metric] = {}

    def add(self, sample: MetricSample) -> None:
        for name, value in sample.values.items():
            metric = self._metrics.get(name)
            if metric is None:
                metric = self._metrics[name] = _Metric(
                    goal(name), is_throughput(name), deque(maxlen=self.trend_points)
                )
            self._add(metric, sample.rank, sample.step, value)

    def add_all(self, samples: Iterable[MetricSample]) -> None:
        for sample in samples:
            self.add(sample)

    def _add(self, metric: _Metric, rank: int, step: int, value: float) -> None:
        series = metric.by_rank.get(rank)
        if series is None:
            series = metric.by_rank[rank] = {}
        series[step] = value
        if len(series) > self.max_points:
            metric.by_rank[rank] = _thin(series, self.max_points // 2)
        if value == value:
            spread = metric.spread.get(step)
            if spread is None:
                metric.spread[step] = [value, value, 1]
                if len(metric.spread) > self.max_points:
                    kept = _thin(dict.fromkeys(metric.spread, 0.0), self.max_points // 2)
                    metric.spread = {s: metric.spread[s] for s in kept}
            else:
                spread[0] = min(spread[0], value)
                spread[1] = max(spread[1], value)
                spread[2] += 1
        if not metric.throughput:
            metric.latest = value
            metric.recent.append(value)
            metric.better(value)
            return
        if not math.isfinite(value):
            return
        sums = metric.rank_sums.get(rank)
        if sums is None:
            sums = metric.rank_sums[rank] = [0.0, 0]
            metric.recent.clear()  # the totals so far lacked this rank: no trend from them
        sums[0] += value
        sums[1] += 1
        total = metric.total_now = metric.total_now + value - metric.rank_latest.get(rank, 0.0)
        metric.rank_latest[rank] = value
        metric.totals[step] = total
        if len(metric.totals) > self.max_points:
            metric.totals = _thin(metric.totals, self.max_points // 2)
        metric.latest = total
        metric.recent.append(total)
        metric.better(total)

    # -- reading ---------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The metrics seen, in the order first seen."""
        return list(self._metrics)

    def ranks(self, name: str) -> list[int]:
        """The ranks that printed a metric."""
        metric = self._metrics.get(name)
        return sorted(metric.by_rank) if metric else []

    def series(self, name: str, rank: int) -> list[tuple[int, float]]:
        """(step, value) of one rank's metric, by step."""
        metric = self._metrics.get(name)
        points = metric.by_rank.get(rank, {}) if metric else {}
        return sorted(points.items())

    def spread(self, name: str) -> list[StepRange]:
        """Min and max across ranks at each step (NaNs left out), by step."""
        metric = self._metrics.get(name)
        if metric is None:
            return []
        return [StepRange(s, lo, hi, int(n)) for s, (lo, hi, n) in sorted(metric.spread.items())]

    def total(self, name: str) -> list[tuple[int, float]]:
        """A throughput summed over ranks (each rank's latest) at each step; [] for others."""
        metric = self._metrics.get(name)
        return sorted(metric.totals.items()) if metric else []

    def latest(self, name: str) -> float | None:
        metric = self._metrics.get(name)
        return metric.latest if metric else None

    def best(self, name: str) -> float | None:
        metric = self._metrics.get(name)
        return metric.best if metric else None

    def trend(self, name: str) -> Trend:
        metric = self._metrics.get(name)
        return trend_of(metric.recent) if metric else Trend.UNKNOWN

    def view(self, name: str) -> MetricView:
        metric = self._metrics.get(name)
        if metric is None:
            return MetricView(name, goal(name), is_throughput(name), None, None, Trend.UNKNOWN, ())
        return MetricView(
            name, metric.goal, metric.throughput, metric.latest, metric.best,
            trend_of(metric.recent), tuple(sorted(metric.by_rank)),
        )  # fmt: skip

    def summary(self) -> dict[str, float]:
        """The run in a few numbers for history: `<name>.last` and `<name>.best` for each
        metric that has them, and `<name>.mean` for each throughput: the sum over ranks of
        each rank's mean (exact however the ranks' lines interleave).
        A last value may be NaN: the run ended on a wrong number."""
        out: dict[str, float] = {}
        for name, metric in self._metrics.items():
            # A throughput's running sum gathers float noise (8.600000000000005): 12 digits.
            said = _tidy if metric.throughput else float
            if metric.latest is not None:
                out[f"{name}.last"] = said(metric.latest)
            if metric.best is not None:
                out[f"{name}.best"] = said(metric.best)
            if metric.throughput and metric.rank_sums:
                out[f"{name}.mean"] = _tidy(sum(s / n for s, n in metric.rank_sums.values()))
        return out
