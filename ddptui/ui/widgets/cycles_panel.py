"""Provides CyclesPanel: an elastic run's restart story — each rendezvous round (when, why,
who, world size, steps before and after), restarts used of those allowed, nodes that left or
joined, and the restart storm and no-progress alarms, as the core decided them; for a torchft
job, the Lighthouse's quorum instead (its id, each group's step and lag, the changes)."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from ddptui.core.monitor.cycles import MembershipChanged, RestartAlarm, RestartCycle
from ddptui.core.monitor.lighthouse import QuorumReport
from ddptui.ui.widgets.side_panel import SidePanel

MAX_NOTES = 8


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def cycle_lines(cycle: RestartCycle) -> Text:
    """`round 1 · 09:00:08 · 2 nodes, world 2 · restarts 1/3` then its cause and steps."""
    text = Text()
    text.append(f"round {cycle.index}", style="bold")
    text.append(f" · {_clock(cycle.started)} · {len(cycle.members)} node(s), ")
    text.append(f"world {cycle.world_size}")
    text.append(f" · restarts {cycle.restarts}/{cycle.max_restarts}\n")
    style = "green" if cycle.index == 0 else "yellow"
    text.append(f"  why: {cycle.cause}\n", style=style)
    text.append(f"  who: {', '.join(cycle.nodes) or '-'}\n", style="dim")
    before = "-" if cycle.step_before is None else str(cycle.step_before)
    reached = "-" if cycle.step_reached is None else str(cycle.step_reached)
    text.append(f"  steps: {before} before → {reached} reached\n", style="dim")
    return text


def quorum_lines(report: QuorumReport) -> Text:
    """`quorum 4 · 2 groups · 2 heartbeating`, then each group's step, lag and failures."""
    text = Text()
    text.append(f"quorum {report.quorum_id}", style="bold")
    text.append(f" · {len(report.members)} group(s)")
    if report.heartbeating >= 0:
        text.append(f" · {report.heartbeating} heartbeating")
    text.append("\n")
    lag = dict(report.lag)
    for member in report.members:
        behind = lag.get(member.replica, 0)
        text.append(f"  {member.replica} step {member.step} ")
        text.append(f"lag {behind}", style="yellow" if behind else "green")
        if member.commit_failures:
            text.append(f" · commit failures {member.commit_failures}", style="red")
        text.append("\n")
    return text


class CyclesPanel(SidePanel):
    """The restart timeline, newest round last; hidden until the run has a second round
    or the operator asks for it."""

    DEFAULT_CSS = """
    CyclesPanel {
        height: auto;
        max-height: 20;
        border: round $accent;
        padding: 0 1;
        display: none;
        &.-shown { display: block; }
        & > Static { width: 100%; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = self.panel_title = "Restarts"
        self._body = Static("")
        self.cycles: dict[int, RestartCycle] = {}
        self.notes: list[tuple[str, str]] = []  # (style, text): membership changes, alarms
        self.quorum: QuorumReport | None = None

    def reset(self) -> None:
        self.cycles.clear()
        self.notes.clear()
        self.quorum = None
        self.border_title = self.panel_title = "Restarts"
        self.remove_class("-shown")
        self._body.update("")

    def compose(self) -> ComposeResult:
        yield self._body

    def toggle(self) -> bool:
        self.toggle_class("-shown")
        self._draw()
        return self.has_class("-shown")

    def show_cycle(self, cycle: RestartCycle) -> None:
        self.cycles[cycle.index] = cycle
        if cycle.index > 0:
            self.add_class("-shown")  # a restart happened: the story is worth the room
        self._draw()

    def show_membership(self, event: MembershipChanged) -> None:
        self._note("yellow", f"{_clock(event.ts)} {event.node} {event.change}: {event.detail}")

    def show_quorum(self, event: QuorumReport) -> None:
        """torchft's quorum: shown from its first (the groups' story is the run's)."""
        if self.quorum is None:
            self.border_title = self.panel_title = "Quorum (torchft)"
            self.add_class("-shown")
        self.quorum = event
        if event.change is not None:
            self._note("yellow", f"{_clock(event.change.ts)} {event.change.said()}")
        else:
            self._draw()

    def show_alarm(self, event: RestartAlarm) -> None:
        self.add_class("-shown")
        self._note("bold red", f"{_clock(event.ts)} {event.detail}")

    def _note(self, style: str, text: str) -> None:
        self.notes = [*self.notes, (style, text)][-MAX_NOTES:]
        self._draw()

    def _draw(self) -> None:
        if self.shown:
            self._body.update(self.full_text())

    def full_text(self) -> Text:
        """The quorum or the rounds, then the changes and alarms, newest last."""
        text = Text()
        if self.quorum is not None:
            text.append_text(quorum_lines(self.quorum))
        elif not self.cycles:
            text.append("no rendezvous round yet\n", style="dim")
        for index in sorted(self.cycles):
            text.append_text(cycle_lines(self.cycles[index]))
        for style, note in self.notes:
            text.append(note + "\n", style=style)
        text.rstrip()
        return text
