"""Provides StackGroupsPanel: a stall and every rank's stacks folded into groups, suspects first."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from ddptui.core.diagnose.stall_events import StacksReport
from ddptui.ui.widgets.grid_cells import SUSPECT_GLYPH
from ddptui.ui.widgets.side_panel import SidePanel

MAX_GROUPS = 8
MAX_RANKS_SHOWN = 12


def _ranks(ranks: tuple[int, ...]) -> str:
    shown = ", ".join(map(str, ranks[:MAX_RANKS_SHOWN]))
    return shown + (f" … (+{len(ranks) - MAX_RANKS_SHOWN})" if len(ranks) > MAX_RANKS_SHOWN else "")


class StackGroupsPanel(SidePanel):
    """Hidden until the job stalls or stacks are taken; the screen sets what it shows."""

    panel_title = "Stacks"

    DEFAULT_CSS = """
    StackGroupsPanel {
        height: auto;
        max-height: 16;
        padding: 0 1;
        margin-top: 1;
        border-top: solid $warning;
        display: none;
        &.-shown { display: block; }
        & > Static { width: 100%; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.report: StacksReport | None = None
        self.stalled_since: float | None = None  # when the last rank progressed, if stalled
        self.stall_ended: float | None = None  # when the run ended in its stall: the clock stops
        self.keys = ("s", "K")
        self._body = Static("")

    def compose(self) -> ComposeResult:
        yield self._body

    def on_mount(self) -> None:
        self.set_interval(1.0, self._tick)

    def _tick(self) -> None:
        if self.stalled_since is not None and self.stall_ended is None:
            self._redraw()  # the time since the last progress goes on

    def show_stacks(self, report: StacksReport) -> None:
        self.report = report
        self._redraw()

    def show_stall(self, since: float | None) -> None:
        """When the last rank progressed, while stalled; None once ranks progress again."""
        self.stalled_since = since
        self.stall_ended = None
        self._redraw()

    def end_stall(self, at: float) -> None:
        """The run ended while stalled: the stall is over, its length what it came to."""
        if self.stalled_since is not None and self.stall_ended is None:
            self.stall_ended = at
            self._redraw()

    @staticmethod
    def now() -> float:
        return time.time()

    def _redraw(self) -> None:
        text = self.describe()
        self.set_class(bool(text.plain), "-shown")
        self._body.update(text)

    def full_text(self) -> Text:
        return self.describe()

    def describe(self) -> Text:
        text = Text()
        if self.stalled_since is not None:
            end = self.stall_ended if self.stall_ended is not None else self.now()
            since = max(0.0, end - self.stalled_since)
            text.append("Stalled", style="bold yellow")
            over = " until the run ended" if self.stall_ended is not None else ""
            text.append(f" · no rank progressed for {since:.0f} s{over}\n")
        report = self.report
        if report is None:
            if self.stalled_since is not None:
                text.append("taking every rank's stacks…", style="dim")
            return text
        text.append("Stacks", style="bold")
        py_spy = "" if report.pyspy in ((), ("used",)) else f" · py-spy {', '.join(report.pyspy)}"
        text.append(f" · {report.method}{py_spy}\n", style="dim")
        if report.deadlock:
            text.append("Deadlock", style="bold magenta")
            text.append(" · the groups wait on each other in different collectives\n")
        for group in report.groups[:MAX_GROUPS]:
            count = f"{len(group.ranks)} rank{'s' if len(group.ranks) > 1 else ''}"
            if group.suspect:
                mark = f"{SUSPECT_GLYPH} {'deadlock' if report.deadlock else 'suspect '}"
                text.append(mark, style="bold magenta")
            else:
                text.append("          ")
            text.append(f"{count:>9}: ", style="bold")
            text.append(group.label)
            if group.collective:
                text.append(f" · in {group.collective}", style="italic")
            text.append(f"  [{_ranks(group.ranks)}]\n", style="dim")
        if len(report.groups) > MAX_GROUPS:
            text.append(f"… {len(report.groups) - MAX_GROUPS} more groups\n", style="dim")
        for line in report.collectives:
            text.append("flight recorder: ", style="bold")
            text.append(line + "\n")
        for problem in report.problems:
            text.append(f"not taken: {problem}\n", style="red")
        take, whole = self.keys
        text.append(f"{take}: take stacks again · {whole}: the chosen rank's whole stack", "dim")
        return text
