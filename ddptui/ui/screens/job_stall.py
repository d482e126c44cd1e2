"""Provides StallActions: the job screen's part in a stall — the Stacks panel, `s`, `K`, and
the flight recorder's word in the root-cause panel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.screen import Screen

from ddptui.core.events import RankChanged, RankState
from ddptui.core.session.process import SessionProcess
from ddptui.ui.messages import RecorderUpdate, StacksUpdate, StallUpdate
from ddptui.ui.screens.rank_stack import RankStackScreen
from ddptui.ui.widgets.root_cause import RootCausePanel
from ddptui.ui.widgets.run_outcome import RunOutcome
from ddptui.ui.widgets.stack_groups import StackGroupsPanel


class StallActions(Screen[None]):
    """Mixed into the job screen, which owns `stacks`, `outcome`, `ranks` and `session`."""

    stacks: StackGroupsPanel
    root_cause: RootCausePanel
    outcome: RunOutcome
    ranks: Mapping[tuple[str, int], RankChanged]
    selected: tuple[str, int] | None
    session: SessionProcess | None

    @property
    def job_active(self) -> bool:
        raise NotImplementedError

    def stall_progress(self, changes: Sequence[RankChanged]) -> None:
        """A rank progresses again: the stall is over."""
        if self.stacks.stalled_since and any(e.state == RankState.RUNNING for e in changes):
            self.stacks.show_stall(None)
            self.outcome.set_phase("running")

    def on_stall_update(self, message: StallUpdate) -> None:
        event = message.event
        self.stacks.show_stall(event.ts - event.since_s)
        self.outcome.set_phase("stalled: no rank progresses (see Stacks)")

    def on_stacks_update(self, message: StacksUpdate) -> None:
        self.stacks.show_stacks(message.event)

    def on_recorder_update(self, message: RecorderUpdate) -> None:
        self.root_cause.show_recorder(message.event)

    def action_take_stacks(self) -> None:
        if self.session is None or not self.job_active:
            self.notify("no running job to take stacks of", timeout=3)
            return
        self.session.request_stacks()
        self.notify("taking every rank's stacks…", timeout=3)

    def action_rank_stack(self) -> None:
        """The chosen rank's whole stack (else the first suspect's), from the last stacks."""
        report = self.stacks.report
        if report is None or not report.ranks:
            self.notify(f"no stacks taken yet: {self.stacks.keys[0]} takes them", timeout=4)
            return
        chosen = self.ranks.get(self.selected) if self.selected else None
        rank = chosen.rank if chosen else next((g.ranks[0] for g in report.groups), None)
        found = next((r for r in report.ranks if r[0] == rank), None)
        if found is None:
            self.notify(f"no stack of rank {rank} in the last stacks", timeout=4)
            return
        rank, node, local_rank, text = found
        title = f"rank {rank} · {node} local rank {local_rank} · {report.method}"
        self.app.push_screen(RankStackScreen(title, text))
