"""Provides RootCausePanel: the failure story as the monitor tells it (culprit first), diagnoses."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from ddptui.core.diagnose.audit import CollectiveMismatch
from ddptui.core.diagnose.failures import lost_a_peer
from ddptui.core.diagnose.stall_events import FlightRecorderReport
from ddptui.core.diagnose.verdict import Verdict
from ddptui.core.events import Diagnosis, FailureRecord, RankChanged
from ddptui.core.monitor.patterns import EXITED, TRACEBACK, describe_exit
from ddptui.core.story.incident import OUTLOOK_WORDS, Incident, IncidentReport
from ddptui.ui.widgets.side_panel import SidePanel

TRACEBACK_TAIL = 6
# `[/__w/pytorch/.../pair.cc:553] ` before a C++ error's message: where, not what
_SOURCE_TAG = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp|cu):\d+\] ?")
MAX_OTHERS = 6
CAUSE_WORDS = {  # failures.cause_of's names, as the panel says them
    "stopped_by_launcher": "stopped by its launcher",
    "peer_closed": "a peer closed the connection",
    "waiting_in_collective": "waiting in a collective",
    "watchdog_timeout": "collective timed out",
    "stopped_by_teardown": "stopped by the teardown",
    "deadlock": "in a deadlock",
    "agent_exited": "its agent ended",
    "duplicate_gpu": "two ranks on one GPU",
    "collective_mismatch": "passed what the others did not (collective mismatch)",
}
MAX_NOTED = 12


def who(rank: int | None, node: str, local_rank: int) -> str:
    return f"rank {rank} on {node}" if rank is not None else f"{node} local rank {local_rank}"


class RootCausePanel(SidePanel):
    """Hidden until something fails; the screen adds failures and rank diagnoses."""

    panel_title = "Root cause"

    DEFAULT_CSS = """
    RootCausePanel {
        height: auto;
        max-height: 20;
        padding: 0 1;
        margin-top: 1;
        border-top: solid $error;
        display: none;
        &.-shown { display: block; }
        & > Static { width: 100%; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.failures: list[FailureRecord] = []
        self.diagnoses: dict[tuple[str, int], tuple[int | None, tuple[Diagnosis, ...]]] = {}
        self.jump_key = "E"
        self.recorder: FlightRecorderReport | None = None
        self.verdict: Verdict | None = None
        self.mismatches: list[CollectiveMismatch] = []
        self.incidents: dict[int, Incident] = {}
        self.lead = 0  # the story's lead incident's number (0: none yet)
        self._body = Static("")

    def compose(self) -> ComposeResult:
        yield self._body

    def show_failures(self, ordered: Sequence[FailureRecord]) -> None:
        """The monitor's failures so far, in its order (the culprit first)."""
        self.failures = list(ordered)
        self._redraw()

    def show_rank(self, event: RankChanged) -> None:
        key = (event.node, event.local_rank)
        if event.diagnoses or key in self.diagnoses:
            self.diagnoses[key] = (event.rank, event.diagnoses)
            self._redraw()

    def show_recorder(self, report: FlightRecorderReport) -> None:
        """The flight recorder's dumps, gathered on their own: who never entered what."""
        self.recorder = report
        self._redraw()

    def show_verdict(self, verdict: Verdict) -> None:
        """The failure's one verdict, as the core judged it (drawn first)."""
        self.verdict = verdict
        self._redraw()

    def show_incident(self, report: IncidentReport) -> None:
        """An incident of the story, and which incident leads it (drawn first of all)."""
        self.incidents[report.incident.number] = report.incident
        self.lead = report.lead
        self._redraw()

    @property
    def lead_incident(self) -> Incident | None:
        """The incident the core named the story's lead, as last reported."""
        return self.incidents.get(self.lead)

    def show_mismatch(self, mismatch: CollectiveMismatch) -> None:
        """A collective the ranks disagree on, as the audit found it."""
        self.mismatches.append(mismatch)
        self._redraw()

    def reset(self) -> None:
        self.failures.clear()
        self.diagnoses.clear()
        self.recorder = None
        self.verdict = None
        self.mismatches.clear()
        self.incidents.clear()
        self.lead = 0
        self._redraw()

    def full_text(self) -> Text:
        return self.describe()

    @property
    def first(self) -> FailureRecord | None:
        return self.failures[0] if self.failures else None

    def _redraw(self) -> None:
        text = self.describe()
        self.set_class(bool(text.plain), "-shown")
        self._body.update(text)

    def describe(self) -> Text:
        text = describe_story(self.incidents, self.lead)
        ordered = self.failures
        if ordered:
            if text.plain:  # the story leads: torchrun's order is evidence, not the verdict
                text.append("\nFailures", style="bold red")
                text.append(" · as torchrun's agents reported them\n", style="dim")
            elif ordered[0].root_cause:
                text.append("Root cause", style="bold red")
                text.append(" · first observed failure\n", style="dim")
            else:
                text.append("Failures", style="bold red")
                text.append(" · each stopped because of another; the first is still to come\n")
            text.append_text(_describe_root(ordered[0]))
            others = ordered[1:]
            if others and ordered[0].root_cause:
                count = f"{len(others)} rank{'s' if len(others) > 1 else ''}"
                text.append(f"\nthen {count} failed because of it", style="bold")
            elif others:
                text.append("\nthen", style="bold")
            for record in others[:MAX_OTHERS]:
                text.append(f"\n  {who(record.rank, record.node, record.local_rank)} ")
                text.append(describe_exit(record.exit_code), style="red")
                if record.cause in CAUSE_WORDS:
                    text.append(f" · {CAUSE_WORDS[record.cause]}", style="yellow")
                if record.error:
                    text.append(f" {_SOURCE_TAG.sub('', record.error)[:72]}", style="dim")
            if len(others) > MAX_OTHERS:
                text.append(f"\n  … {len(others) - MAX_OTHERS} more", style="dim")
        noted = self._noted()
        if noted:
            if ordered:
                text.append("\n")
            text.append("Diagnoses", style="bold yellow")
            for node, lr, rank, diag in noted[:MAX_NOTED]:
                text.append(f"\n  {who(rank, node, lr)}: ", style="bold")
                text.append(diag.summary[:160])
            if len(noted) > MAX_NOTED:
                text.append(f"\n  … {len(noted) - MAX_NOTED} more", style="dim")
        if ordered or noted:
            text.append(f"\n{self.jump_key}: jump to the first error line", style="italic dim")
        if ordered:
            text.append_text(_traceback_tail(ordered[0]))
        if self.recorder is not None:
            text.append("\n" if text.plain else "")
            text.append_text(_describe_recorder(self.recorder))
        for mismatch in self.mismatches[:MAX_OTHERS]:
            text.append("\n" if text.plain else "")
            text.append("Mismatch ", style="bold red")
            text.append(f"{mismatch.describe()}: {mismatch.detail}"[:200])
        if self.verdict is not None:
            text.append("\n" if text.plain else "")
            text.append_text(describe_verdict(self.verdict))
        return text

    def _noted(self) -> list[tuple[str, int, int | None, Diagnosis]]:
        """Each rank's diagnoses, less what the failure records already say; the ranks that
        lost a peer (likely victims) after the others, whose own error may be the cause."""
        recorded = {(r.node, r.local_rank) for r in self.failures}
        ranks = sorted(self.diagnoses.items(), key=lambda item: lost_a_peer(item[1][1]))
        return [
            (node, lr, rank, diag)
            for (node, lr), (rank, diags) in ranks
            for diag in diags
            if diag.kind != EXITED and not (diag.kind == TRACEBACK and (node, lr) in recorded)
        ]


def describe_story(incidents: dict[int, Incident], lead: int) -> Text:
    """The story's lead first: its kind and who (row 1), whose it is and the outlook (row 2),
    what happened (row 3 on); then the other incidents a line each, those over marked so."""
    text = Text()
    first = incidents.get(lead)
    if first is None:
        return text
    text.append(f"▶ {first.kind.words}", style="bold red")
    if first.who:
        text.append(f": {first.who}", style="bold")
    if first.over:
        text.append(" (over)", style="dim")
    whose = DOMAIN_WORDS.get(first.domain)  # unknown: said by saying nothing
    text.append(f"\n  {first.role}" + (f" · {whose}" if whose else ""))
    advice = OUTLOOK_WORDS[first.outlook]
    if advice:
        text.append(f" · {advice}", style="bold")
    if first.summary:
        text.append(f"\n  {first.summary}")
    if first.hurt:
        text.append(f"\n  hurt: ranks {', '.join(map(str, first.hurt))}", style="dim")
    others = [i for n, i in sorted(incidents.items()) if n != lead]
    for incident in others[:MAX_OTHERS]:
        text.append("\n· ", style="dim")
        text.append(incident.kind.words, style="dim" if incident.over else "yellow")
        text.append(f"{': ' + incident.who if incident.who else ''} — {incident.summary[:120]}")
        if incident.over:
            text.append(" (over)", style="dim")
    if len(others) > MAX_OTHERS:
        text.append(f"\n· … {len(others) - MAX_OTHERS} more", style="dim")
    return text


def describe_verdict(verdict: Verdict) -> Text:
    """`Verdict rank 1 on n0 · initiating · the job's code · fix it first`, its summary, and
    the evidence lines."""
    text = Text()
    text.append("Verdict ", style="bold red")
    if verdict.rank is not None or verdict.node:
        place = who(verdict.rank, verdict.node, verdict.local_rank or 0)
        text.append(place if verdict.rank is not None else verdict.node, style="bold")
    text.append(f" · {verdict.role} · {verdict.signature}", style="yellow")
    text.append(f" · {DOMAIN_WORDS.get(verdict.domain, str(verdict.domain))}")
    advice = OUTLOOK_WORDS.get(verdict.outlook) or "restart: unknown"  # the story's words
    text.append(f" · {advice}", style="bold")
    text.append(f"\n  {verdict.summary}")
    for line in verdict.evidence:
        text.append(f"\n  │ {line[:160]}", style="dim")
    return text


DOMAIN_WORDS = {
    "job": "the job's code",
    "infrastructure": "the infrastructure",
    "operator": "the operator",
}


def _describe_root(record: FailureRecord) -> Text:
    text = Text()
    text.append(f"✗ {who(record.rank, record.node, record.local_rank)}", style="bold")
    if record.host:
        text.append(f" (host {record.host})")
    text.append(" · ")
    text.append(describe_exit(record.exit_code), style="bold red")
    if record.time:
        text.append(f" · {record.time.replace('_', ' ')}", style="dim")
    if record.error:
        text.append(f"\n  {record.error}", style="red")
    if record.error_file:
        text.append("\n  error file ", style="dim")
        text.append(record.error_file)
    return text


def _traceback_tail(record: FailureRecord) -> Text:
    """The innermost frames of the root cause's traceback, from torchrun's error file."""
    text = Text()
    lines = [line for line in record.traceback if line.strip()]
    if lines and lines[-1].strip() == record.error:
        lines.pop()
    tail = [line for line in lines if not set(line.strip()) <= {"^", "~"}][-TRACEBACK_TAIL:]
    if len(tail) > 1:
        text.append("\ntraceback (innermost last):", style="dim")
        for line in tail:
            text.append(f"\n  {line.rstrip()}", style="dim")
    return text


def _describe_recorder(report: FlightRecorderReport) -> Text:
    when = "at the watchdog timeout" if report.trigger == "watchdog" else f"at the {report.trigger}"
    text = Text()
    text.append("Flight recorder", style="bold magenta")
    text.append(f" · {when}, {report.dumps} rank(s)' dumps\n", style="dim")
    if report.deadlock:
        text.append("deadlock: the groups wait on each other\n", style="bold magenta")
    for line in report.collectives:
        text.append(f"  {line}\n")
    for ranks, place in report.waiting:
        text.append(f"  ranks {', '.join(map(str, ranks))} wait in {place}\n", style="dim")
    if not report.collectives:
        text.append("  no rank is behind the others in any collective\n", style="dim")
    for problem in report.problems:
        text.append(f"  not gathered: {problem}\n", style="red")
    return text
