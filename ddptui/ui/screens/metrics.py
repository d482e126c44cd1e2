"""Provides MetricsScreen: the run's metrics, one plotted against step, each with its figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Static

from ddptui.core.metrics.curves import Curve, PastRun
from ddptui.core.metrics.metrics_file import FILE_NAME, read_samples
from ddptui.core.metrics.names import Goal
from ddptui.core.metrics.shapes import rank_set
from ddptui.core.metrics.store import MetricView, Trend
from ddptui.ui.relay import LiveMetrics
from ddptui.ui.widgets.metric_plot import MetricPlot

REFRESH_S = 0.5
_ARROW = {Trend.DOWN: "↓", Trend.UP: "↑", Trend.FLAT: "→", Trend.UNKNOWN: " "}


def figure(value: float | None) -> str:
    """A metric's value in at most 10 characters: `1.2346`, `12,345`, `nan`."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if abs(value) >= 1e4:
        return f"{value:,.0f}" if abs(value) < 1e9 else f"{value:.3e}"
    return f"{value:.5g}"


def trend_style(view: MetricView) -> str:
    """Green where the trend is the goal's way, red where it is the other way."""
    if view.trend in (Trend.FLAT, Trend.UNKNOWN) or view.goal is Goal.NONE:
        return "dim"
    good = (view.trend is Trend.DOWN) == (view.goal is Goal.LOWER)
    return "green" if good else "red"


def metric_rows(views: list[MetricView], selected: str | None) -> Text:
    """Two lines a metric: its name, latest value and trend; its best and who prints it."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if not views:
        text.append("no metrics read yet: the ranks' lines have printed none", style="dim")
        return text
    for index, view in enumerate(views):
        chosen = view.name == selected
        text.append("▸ " if chosen else "  ", style="bold")
        name = view.name + (" Σ" if view.throughput else "")
        text.append(f"{index + 1} {name}".ljust(15)[:15], style="bold" if chosen else "")
        latest = figure(view.latest)
        style = "bold red" if latest in ("nan", "inf", "-inf") else ("bold" if chosen else "")
        text.append(latest.rjust(10), style=style)
        text.append(f" {_ARROW[view.trend]}\n", style=trend_style(view))
        who = rank_set(view.ranks) if view.ranks else ""
        text.append(f"    best {figure(view.best)}".ljust(19) + f" {who}\n", style="dim")
    return text


class MetricsScreen(Screen[None]):
    """Renders what the run's MetricStore decided (LiveMetrics): the chosen metric's curves,
    and beside it every metric's latest, best and trend; a past run of the same profile can
    be laid over the plot (`past_runs`: their ids and run directories, newest first)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right_square_bracket", "pick(1)", "Next metric", id="metrics.next"),
        Binding("left_square_bracket", "pick(-1)", "Prev metric", id="metrics.prev"),
        Binding("c", "compare", "Compare run", id="metrics.compare"),
        Binding("escape,M", "close", "Back", id="metrics.close"),
    ]

    DEFAULT_CSS = """
    MetricsScreen { layout: vertical; }
    MetricsScreen #metrics-title { height: 1; padding: 0 1; background: $boost; }
    MetricsScreen #metrics-body { height: 1fr; }
    MetricsScreen MetricPlot { border: round $primary-background; }
    MetricsScreen #metrics-figures {
        width: 32; height: 1fr; border: round $primary-background; padding: 0 0;
    }
    """

    def __init__(
        self,
        metrics: LiveMetrics,
        run_id: str = "",
        past_runs: list[tuple[str, Path]] | None = None,
        compare: str | None = None,
    ) -> None:
        super().__init__()
        self.metrics = metrics
        self.run_id = run_id
        self.past_runs = past_runs or []
        self.selected: str | None = None
        self.past: PastRun | None = None
        self._past_index = -1
        self.title_bar = Static(id="metrics-title")
        self.plot = MetricPlot(id="metrics-plot")
        self.figures = Static(id="metrics-figures")
        self._views: list[MetricView] = []
        if compare is not None:
            where = dict(self.past_runs)
            if compare in where:
                self._past_index = [r for r, _ in self.past_runs].index(compare)

    def compose(self) -> ComposeResult:
        yield self.title_bar
        with Horizontal(id="metrics-body"):
            yield self.plot
            yield self.figures
        yield Footer()

    def on_mount(self) -> None:
        self.figures.border_title = "latest · trend · best"
        self.set_interval(REFRESH_S, self.redraw)
        if self._past_index >= 0:
            self._load_past(*self.past_runs[self._past_index])
        self.redraw()

    def redraw(self) -> None:
        views, _ = self.metrics.snapshot(None)
        names = [v.name for v in views]
        if self.selected not in names:
            self.selected = names[0] if names else None
        _, curves = self.metrics.snapshot(self.selected)
        self._views = views
        if self.past is not None and self.selected:
            past = self.past.curve(self.selected)
            curves = [*curves, past] if past else curves
        self.plot.show(curves)
        self.figures.update(metric_rows(views, self.selected))
        self.title_bar.update(self._title(views, curves))

    def _title(self, views: list[MetricView], curves: list[Curve]) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("Metrics", style="bold")
        text.append(f" · run {self.run_id}" if self.run_id else "")
        view = next((v for v in views if v.name == self.selected), None)
        if view is not None:
            text.append(" · ")
            text.append(view.name, style="bold")
            text.append(" Σ ranks" if view.throughput else "")
            text.append(f" · latest {figure(view.latest)} · best {figure(view.best)}")
        if self.past is not None:
            text.append(f" · over run {self.past.run_id}", style="yellow")
        elif not self.past_runs:
            text.append(" · no past run of this profile to compare", style="dim")
        return text

    def action_pick(self, offset: int) -> None:
        names = [v.name for v in self._views]
        if not names:
            return
        index = names.index(self.selected) if self.selected in names else 0
        self.selected = names[(index + offset) % len(names)]
        self.redraw()

    def action_compare(self) -> None:
        """The next past run of this profile laid over the plot; after the last, none."""
        if not self.past_runs:
            self.notify("no past run of this profile has metrics to compare")
            return
        self._past_index += 1
        if self._past_index >= len(self.past_runs):
            self._past_index = -1
            self.past = None
            self.redraw()
            return
        self._load_past(*self.past_runs[self._past_index])

    @work(thread=True, group="past-run", exclusive=True, exit_on_error=False)
    def _load_past(self, run_id: str, run_dir: Path) -> None:
        """A past run's metrics file read in a thread: a long run's file takes a while."""
        past = PastRun(run_id, read_samples(run_dir / FILE_NAME))
        self.app.call_from_thread(self._past_loaded, past)

    def _past_loaded(self, past: PastRun) -> None:
        self.past = past
        self.redraw()

    def action_close(self) -> None:
        self.dismiss()
