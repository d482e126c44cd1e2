"""Provides RunOutcome: the run's phase, recent notices, per-node teardown proof and result."""

from __future__ import annotations

from collections import deque
from typing import Literal

import hostlist
from rich.text import Text
from textual.widgets import Static

from ddptui.core.events import Notice, RankState, RunPhase, TeardownReport
from ddptui.core.runs.summary import RunSummary
from ddptui.core.story.incident import IncidentKind

MAX_NOTICES = 4
NODE_LINES = 16  # up to this many nodes, a line each; beyond, the clean ones as one hostlist
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
        self.phase = RunPhase.NOT_LAUNCHED
        self.phase_detail = ""
        self.run_id: str | None = None
        self.run_dir: str | None = None
        self.notices: deque[Notice] = deque(maxlen=MAX_NOTICES)
        self.reports: dict[str, TeardownReport] = {}
        self.summary: RunSummary | None = None
        self.stopped_by: StopRequest = None
        self.launch_key = ""  # the key that launches, said before the first launch
        self._drawn_lines = 0

    def on_mount(self) -> None:
        self._redraw()

    def reset(self, run_id: str, run_dir: str) -> None:
        self.run_id, self.run_dir = run_id, run_dir
        self.notices.clear()
        self.reports.clear()
        self.summary = None
        self.stopped_by = None
        self._redraw()

    def set_phase(self, phase: RunPhase, detail: str = "") -> None:
        """The phase as the session decided it (the console alone says `crashed`)."""
        self.phase, self.phase_detail = phase, detail
        self._redraw()

    def offer_launch(self, key: str) -> None:
        """Say which key launches while the job is not launched ("" where none does: a
        read-only console)."""
        self.launch_key = key
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
        """Draw what the panel holds; laid out again only when its height may change (a
        teardown brings a report per node, and a layout of the whole screen for each would
        hold up the keys on a large job)."""
        text = self.describe()
        lines = text.plain.splitlines() or [""]
        width = self.content_region.width if self.is_mounted else 0
        fits = bool(width) and all(len(line) <= width for line in lines)
        self.update(text, layout=len(lines) != self._drawn_lines or not fits)
        self._drawn_lines = len(lines)

    def describe(self) -> Text:
        text = Text()
        text.append("run ", style="bold")
        text.append(self.run_id or "—")
        phase = f"{self.phase}: {self.phase_detail}" if self.phase_detail else str(self.phase)
        text.append(f"  ·  {phase}", style="bold")
        if self.phase == RunPhase.NOT_LAUNCHED and self.launch_key:
            text.append("\npress ")
            text.append(self.launch_key, style="bold reverse")
            text.append(" to launch")
        if self.run_dir:
            text.append(f"\n    logs {self.run_dir}/nodes", style="dim")
        if self.reports:
            text.append("\nteardown", style="bold")
            text.append_text(_describe_reports(self.reports))
        if self.summary is not None:
            text.append("\nresult ", style="bold")
            text.append_text(_describe_summary(self.summary, self.stopped_by))
        for notice in self.notices:
            text.append(f"\n{notice.level:>7} ", style=_LEVEL_STYLE.get(notice.level, ""))
            text.append(notice.message)
        return text


def _describe_reports(reports: dict[str, TeardownReport]) -> Text:
    """A line per node's proof; on a large job the clean nodes share one line, as a hostlist
    (`✓ clean node[1-63]`; what each reaped stays in the run's events), and every node that
    is not clean keeps a line of its own."""
    text = Text()
    many = len(reports) > NODE_LINES
    if many:
        clean = sorted(node for node, report in reports.items() if report.clean)
        if clean:
            text.append("\n  ✓ clean", style="bold green")
            text.append(f" {hostlist.collect_hostlist(clean)} ({len(clean)} nodes)")
    for node, report in reports.items():
        if many and report.clean:
            continue
        text.append(f"\n  {node} ")
        if report.clean:
            text.append("✓ clean", style="bold green")
        else:
            pids = " ".join(str(p) for p in report.leftover_pids) or "unknown"
            text.append(f"✗ leftover pids {pids}", style="bold red")
        if report.detail:
            text.append(f" — {report.detail}", style="dim")
    return text


OPERATOR_WORDS = IncidentKind.OPERATOR.words


def _describe_summary(summary: RunSummary, stopped_by: StopRequest) -> Text:
    if stopped_by == "detach":
        return Text(f"⇥ {summary.detail}", style="bold yellow")
    done = sum(1 for r in summary.ranks if r.state == RankState.DONE and r.exit_code == 0)
    counts = f"{done}/{summary.world_size} ranks done"
    headline = summary.headline and f"\n  {summary.headline}"
    if summary.ok:
        return Text(f"✓ ok — {counts}", style="bold green") + Text(headline)
    if stopped_by == "teardown":
        # the story's lead (a stall the operator ended), not the first rank the teardown stopped
        lead = "" if summary.headline.startswith(OPERATOR_WORDS) else headline
        return Text(f"■ torn down by the operator — {counts}", style="bold yellow") + Text(lead)
    text = Text(f"✗ not ok — {counts}", style="bold red")
    if summary.detail:
        text.append(f"\n  {summary.detail}")
    return text
