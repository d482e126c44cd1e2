"""Provides MetricSample: what one rank's line reported, at its step and time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One line's metrics from one rank.

    Attributes:
        rank: the global rank that printed the line.
        step: the step the line belongs to: printed on it (step, iteration, epoch) or else
            the rank's last step.
        values: canonical metric name (`names.canonical_name`) -> value; NaN and +-Inf are
            kept, they are what the wrong-number check looks for.
        ts: when the console read the line (seconds since the epoch; 0 if not known).
    """

    rank: int
    step: int
    values: Mapping[str, float]
    ts: float = 0.0
