"""Provides RunOutcome: the run's phase, recent notices, per-node teardown proof and result."""

from __future__ import annotations

from collections import deque
from typing import Literal

from rich.text import Text
from textual.widgets import Static

from ddptui.core.events import Notice, RankState, RunSummary, TeardownReport

MAX_NOTICES = 4
StopRequest = Literal["teardown", "detach"] | None
"""What the operator asked of a running job, if anything."""
_LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


class RunOutcome(Static):
    """A small read-only panel; the screen sets what it shows."""

    DEFAULT_CSS = """
    RunOutcome {
        height: auto;
        padding: 0 1;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.phase = "not launched"
        self.run_id: str | None = None
        self.run_dir: str | None = None
        self.notices: deque[Notice] = deque(maxlen=MAX_NOTICES)
        self.reports: dict[str, TeardownReport] = {}
        self.summary: RunSummary | None = None
        self.stopped_by: StopRequest = None

    def on_mount(self) -> None:
        self._redraw()

    def reset(self, run_id: str, run_dir: str) -> None:
        self.run_id, self.run_dir = run_id, run_dir
        self.notices.clear()
        self.reports.clear()
        self.summary = None
        self.stopped_by = None
        self._redraw()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self._redraw()

    def add_notice(self, notice: Notice) -> None:
        self.notices.append(notice)
        self._redraw()

    def add_report(self, report: TeardownReport) -> None:
        self.reports[report.node] = report
        self._redraw()

    def set_summary(self, summary: RunSummary, *, stopped_by: StopRequest = None) -> None:
        self.summary = summary
        self.stopped_by = stopped_by
        self.run_dir = summary.run_dir
        self._redraw()

    @property
    def all_clean(self) -> bool:
        return bool(self.reports) and all(r.clean for r in self.reports.values())

    def _redraw(self) -> None:
        self.update(self.describe())

    def describe(self) -> Text:
        text = Text()
        text.append("run ", style="bold")
        text.append(self.run_id or "—")
        text.append(f"  ·  {self.phase}", style="bold")
        if self.run_dir:
            text.append(f"\n    logs {self.run_dir}/nodes", style="dim")
        if self.reports:
            text.append("\nteardown", style="bold")
            for node, report in self.reports.items():
                text.append(f"\n  {node} ")
                if report.clean:
                    text.append("✓ clean", style="bold green")
                else:
                    pids = " ".join(str(p) for p in report.leftover_pids) or "unknown"
                    text.append(f"✗ leftover pids {pids}", style="bold red")
                if report.detail:
                    text.append(f" — {report.detail}", style="dim")
        if self.summary is not None:
            text.append("\nresult ", style="bold")
            text.append_text(_describe_summary(self.summary, self.stopped_by))
        for notice in self.notices:
            text.append(f"\n{notice.level:>7} ", style=_LEVEL_STYLE.get(notice.level, ""))
            text.append(notice.message)
        return text


def _describe_summary(summary: RunSummary, stopped_by: StopRequest) -> Text:
    if stopped_by == "detach":
        return Text(f"⇥ {summary.detail}", style="bold yellow")
    done = sum(1 for r in summary.ranks if r.state == RankState.DONE and r.exit_code == 0)
    counts = f"{done}/{summary.world_size} ranks done"
    if summary.ok:
        return Text(f"✓ ok — {counts}", style="bold green")
    if stopped_by == "teardown":
        # The core's detail names the first rank the teardown stopped: noise, not a cause.
        return Text(f"■ torn down by the operator — {counts}", style="bold yellow")
    text = Text(f"✗ not ok — {counts}", style="bold red")
    if summary.detail:
        text.append(f"\n  {summary.detail}")
    return text
