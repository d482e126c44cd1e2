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
        report: for a line that printed no step of its own, which of the rank's reports it
            was (1 for its first sample); None when the line printed its step. Such a line's
            `step` is the rank's last printed step, or this count where the rank never
            printed one (a Trainer's dicts), so that its curve runs over its reports.
    """

    rank: int
    step: int
    values: Mapping[str, float]
    ts: float = 0.0
    report: int | None = None
