"""Provides WrongNumberCheck: a NaN or Inf loss, or a loss that jumps by orders of magnitude."""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from enum import Enum

from ddptui.core.metrics.names import is_loss
from ddptui.core.metrics.sample import MetricSample

SPIKE_FACTOR = 100.0  # a loss this many times its recent median is a spike
WINDOW = 20  # the recent values a rank's median is taken over
MIN_POINTS = 5  # no spike is called before a rank has printed this many finite values


class WrongNumberKind(Enum):
    """What is wrong with the number (the verdict's cause for it)."""

    NAN_OR_INF = "nan_or_inf"
    LOSS_SPIKE = "loss_spike"


@dataclass(frozen=True, slots=True)
class WrongNumber:
    """One rank's wrong number, where it was; `baseline` is the median it jumped from.

    Where: the step its line printed, or, for a line that printed none (`report` set),
    which of the rank's reports it was and the epoch (a fraction) if the line gave one.
    """

    rank: int
    step: int
    metric: str
    value: float
    kind: WrongNumberKind
    baseline: float | None = None
    report: int | None = None
    epoch: float | None = None

    def where(self) -> str:
        """`at step 120`, or `in rank 1's 35th report (epoch 0.52)` for a line with no step."""
        if self.report is None:
            return f"at step {self.step}"
        said = f"in rank {self.rank}'s {ordinal(self.report)} report"
        if self.epoch is not None and math.isfinite(self.epoch):
            said += f" (epoch {self.epoch:.4g})"
        return said

    def said(self) -> str:
        """The finding in words: `loss is nan at step 120`, `loss jumped to 500 in rank 1's
        35th report (recent median 1.95)`."""
        if self.kind is WrongNumberKind.NAN_OR_INF:
            return f"{self.metric} is {self.value} {self.where()}"
        said = f"{self.metric} jumped to {self.value:.4g} {self.where()}"
        if self.baseline is not None:
            said += f" (recent median {self.baseline:.4g})"
        return said


_SUFFIX = {1: "st", 2: "nd", 3: "rd"}


def ordinal(number: int) -> str:
    """`1st`, `2nd`, `3rd`, `11th`, `22nd`, `35th`."""
    if 10 <= number % 100 <= 20:
        return f"{number}th"
    return f"{number}{_SUFFIX.get(number % 10, 'th')}"


@dataclass(slots=True)
class _Recent:
    values: deque[float]
    broken: bool = False  # NaN or Inf since the last finite value: said once


class WrongNumberCheck:
    """Looks at each sample's losses, per rank.

    A NaN or Inf is reported once per rank and metric until a finite value returns (a loss
    that went NaN stays NaN: one finding, not one per step). A spike is a finite value over
    `factor` times the median of the rank's last `window` finite values, once it has
    `min_points` of them; a spike is reported each time and joins the window, so a loss that
    settles at the new level stops being news. Only upward jumps count: a loss that falls a
    hundredfold is training. Losses that are 0 or negative by their median have no scale
    to jump from and are never called spikes.
    """

    def __init__(
        self, factor: float = SPIKE_FACTOR, window: int = WINDOW, min_points: int = MIN_POINTS
    ) -> None:
        self.factor = factor
        self.window = window
        self.min_points = min_points
        self._recent: dict[tuple[int, str], _Recent] = {}

    def check(self, sample: MetricSample) -> list[WrongNumber]:
        """The wrong numbers in one sample (most samples: none)."""
        found: list[WrongNumber] = []
        for name, value in sample.values.items():
            if not is_loss(name):
                continue
            key = (sample.rank, name)
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = _Recent(deque(maxlen=self.window))
            if not math.isfinite(value):
                if not recent.broken:
                    recent.broken = True
                    kind = WrongNumberKind.NAN_OR_INF
                    found.append(_wrong(sample, name, value, kind))
                continue
            recent.broken = False
            if len(recent.values) >= self.min_points:
                median = statistics.median(recent.values)
                if median > 0.0 and value > self.factor * median:
                    kind = WrongNumberKind.LOSS_SPIKE
                    found.append(_wrong(sample, name, value, kind, median))
            recent.values.append(value)
        return found


def _wrong(
    sample: MetricSample,
    name: str,
    value: float,
    kind: WrongNumberKind,
    baseline: float | None = None,
) -> WrongNumber:
    epoch = sample.values.get("epoch") if sample.report is not None else None
    return WrongNumber(sample.rank, sample.step, name, value, kind, baseline, sample.report, epoch)
