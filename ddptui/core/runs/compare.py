"""Provides two runs' metrics and goodput compared: each figure of both, and which is better."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ddptui.core.metrics.metrics_file import FILE_NAME, read_samples
from ddptui.core.metrics.names import Goal, goal
from ddptui.core.metrics.store import MetricStore
from ddptui.core.runs.history import RunHistory, RunRecord
from ddptui.core.story.goodput import Part

GOODPUT = "goodput %"  # the share of the wall time the ranks stepped: higher is better
WALL = "wall s"


@dataclass(frozen=True, slots=True)
class ComparedFigure:
    """One figure (`loss.best`, `samples/s.mean`) of two runs.

    `change` is b against a as a ratio less one (+0.12: b is 12% higher), None where either
    is missing, not finite or a is 0; `better` names the run whose figure is better by the
    metric's goal ("a", "b", or "" when neither or it has no goal).
    """

    figure: str
    a: float | None
    b: float | None
    change: float | None
    better: str


def run_metrics(record: RunRecord) -> dict[str, float]:
    """A run's figures: those its history row keeps, else read again from its metrics file
    (a run whose console died before it wrote its outcome still has that file)."""
    if record.metrics:
        return record.metrics
    path = Path(record.run_dir) / FILE_NAME
    if not path.exists():
        return {}
    store = MetricStore()
    try:
        store.add_all(read_samples(path))
    except OSError:
        return {}
    return store.summary()


def goodput_figures(record: RunRecord) -> dict[str, float]:
    """A run's goodput as figures: `goodput %`, the wall time and each part's seconds
    (`launch s`, `restart s`, ...); none for a run that recorded no goodput."""
    goodput = record.goodput
    if goodput is None or goodput.wall_s <= 0:
        return {}
    figures = {GOODPUT: round(goodput.fraction * 100, 1), WALL: goodput.wall_s}
    figures.update({f"{part} s": goodput.parts.seconds(part) for part in Part})
    return figures


def _better(figure: str, a: float | None, b: float | None) -> str:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or a == b:
        return ""
    if figure == GOODPUT:
        return "b" if b > a else "a"
    lost = {f"{part} s" for part in Part if part != Part.STEPPING}
    if figure in lost:  # time that did not step: less is better
        return "b" if b < a else "a"
    name, _, part = figure.rpartition(".")
    wants = goal(name)
    if wants is Goal.NONE or part not in ("last", "best", "mean"):
        return ""
    return "b" if (b < a) == (wants is Goal.LOWER) else "a"


def compare(a: dict[str, float], b: dict[str, float]) -> list[ComparedFigure]:
    """Every figure either run has, those of `a` first in its order, then `b`'s own."""
    rows: list[ComparedFigure] = []
    for figure in dict.fromkeys([*a, *b]):
        x, y = a.get(figure), b.get(figure)
        change = None
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y) and x:
            change = y / x - 1.0
        rows.append(ComparedFigure(figure, x, y, change, _better(figure, x, y)))
    return rows


def past_metric_runs(
    history: RunHistory,
    profile: str,
    exclude: str = "",
    first: str | None = None,
    script: str | None = None,
) -> list[tuple[str, Path]]:
    """The runs a metrics view can lay over the live one: those of `profile` (and `script`:
    the ad-hoc profile holds every script run from the command line) with a metrics file,
    newest first, `first` (a run named by `--compare`, of any profile) ahead of them."""
    found: list[tuple[str, Path]] = []
    records = history.runs()
    for record in records:
        path = Path(record.run_dir)
        if record.id == exclude or not (path / FILE_NAME).exists():
            continue
        if record.id == first:
            found.insert(0, (record.id, path))
        elif record.profile == profile and script in (None, record.script):
            found.append((record.id, path))
    return found
