"""Provides the Textual messages that carry a session's low-volume events to the screen."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from typing import Any

from textual.message import Message

from ddptui.core.diagnose.audit_watch import MismatchReport
from ddptui.core.diagnose.speed import SpeedRound, StragglerReport
from ddptui.core.diagnose.stall_events import (
    FlightRecorderReport,
    QuietPhase,
    StacksReport,
    StallReport,
    StepBudgets,
)
from ddptui.core.diagnose.verdict import VerdictReport
from ddptui.core.events import (
    AllocationChanged,
    Event,
    FailureReport,
    GpuReport,
    NodeChanged,
    Notice,
    PhaseChanged,
    RankChanged,
    TeardownReport,
)
from ddptui.core.monitor.cycles import CycleReport, MembershipChanged, RestartAlarm
from ddptui.core.monitor.lighthouse import QuorumReport
from ddptui.core.runs.attempts import AttemptStarted
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.drill import DrillReport
from ddptui.core.story.goodput import GoodputReport
from ddptui.core.story.incident import IncidentReport


class SessionMessage(Message):
    """Base of the messages built from one core event (not NodeLines or RankChanged: batched).

    A subclass says which event it carries by its `event` annotation, and that is the one
    place that says how the console receives that kind: `message_for` reads the table the
    annotations fill."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("__annotations__", {}).get("event")
        if isinstance(name, str):
            kind = vars(sys.modules[cls.__module__]).get(name)
            if isinstance(kind, type) and issubclass(kind, Event):
                _MESSAGE_FOR[kind] = cls


_MESSAGE_FOR: dict[type[Event], type[SessionMessage]] = {}


class RankBatch(list[RankChanged]):
    """Rank changes in arrival order, filled by the relay until the screen takes them.

    The relay fills it in the session's thread while the screen may take it: `lock` keeps a
    change from going into a batch already taken.
    """

    taken = False

    def __init__(self, changes: Iterable[RankChanged] = ()) -> None:
        super().__init__(changes)
        self.lock = threading.Lock()


class RankUpdates(Message):
    """Ranks changed: one message for every change until the screen handles it.

    A 1,024-rank job changes every rank in a burst; one message (not one each) and one
    repaint of the grid keep the console responsive, and every change is kept in order
    (the grid's per-rank history shows each step).
    """

    def __init__(self, batch: RankBatch) -> None:
        super().__init__()
        self.batch = batch

    def take(self) -> list[RankChanged]:
        """The changes so far; later ones go into the relay's next batch."""
        with self.batch.lock:
            self.batch.taken = True
            return list(self.batch)


class NodeUpdate(SessionMessage):
    """A node's agent changed state; the newest state of a node supersedes older ones."""

    event: NodeChanged

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, NodeUpdate) and message.event.node == self.event.node


class AllocationUpdate(SessionMessage):
    event: AllocationChanged


class TeardownUpdate(SessionMessage):
    event: TeardownReport


class DrillUpdate(SessionMessage):
    """A preemption drill's table, once its ranks have ended."""

    event: DrillReport


class NoticeUpdate(SessionMessage):
    event: Notice


class SummaryUpdate(SessionMessage):
    event: RunSummary


class PhaseUpdate(SessionMessage):
    """The run moved to another phase, as the session decided."""

    event: PhaseChanged


class FailureUpdate(SessionMessage):
    """torchrun's failure summary named a failed worker."""

    event: FailureReport


class StallUpdate(SessionMessage):
    """The job stalled (no rank progressed), or its stall's suspects changed."""

    event: StallReport


class GpuUpdate(SessionMessage):
    """A node's GPU sample, with the flags it raised (each one kept: the panel draws the run)."""

    event: GpuReport


class QuietPhaseUpdate(SessionMessage):
    """The job's quiet phase (a checkpoint, an evaluation) began or ended."""

    event: QuietPhase


class StepBudgetsUpdate(SessionMessage):
    """The ranks' learned silence budgets in the step loop."""

    event: StepBudgets

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StepBudgetsUpdate)  # only the newest budgets matter


class StacksUpdate(SessionMessage):
    """Every rank's stacks, folded into groups, with the flight recorder's word."""

    event: StacksReport


class RecorderUpdate(SessionMessage):
    """The flight recorder's dumps, gathered on a watchdog timeout or at a stuck job's teardown."""

    event: FlightRecorderReport


class VerdictUpdate(SessionMessage):
    """The failure's one verdict: culprit, role, domain, outlook and evidence."""

    event: VerdictReport


class MismatchUpdate(SessionMessage):
    """The collective audit found ranks that disagree on a collective."""

    event: MismatchReport


class SpeedUpdate(SessionMessage):
    """A scoring round of the straggler watch: the speed view's rows and min/max line."""

    event: SpeedRound

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SpeedUpdate)  # only the newest round matters


class StragglerUpdate(SessionMessage):
    """The straggler watch's named ranks changed."""

    event: StragglerReport


class AttemptUpdate(SessionMessage):
    """The run's job runs again: a restart round or a requeue began its next attempt."""

    event: AttemptStarted


class CycleUpdate(SessionMessage):
    """A rendezvous round began, grew or ended (an elastic run's restart story)."""

    event: CycleReport


class MembershipUpdate(SessionMessage):
    """A node left an elastic job or joined it."""

    event: MembershipChanged


class QuorumUpdate(SessionMessage):
    """torchft's quorum changed its members, or its groups' steps moved on."""

    event: QuorumReport


class RestartAlarmUpdate(SessionMessage):
    """A restart storm, or restarts without progress."""

    event: RestartAlarm


class GoodputUpdate(SessionMessage):
    """Where the run's wall time went so far; the newest split supersedes older ones."""

    event: GoodputReport

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, GoodputUpdate)


class IncidentUpdate(SessionMessage):
    """An incident of the run's story began or changed (it names the story's lead)."""

    event: IncidentReport


def message_for(event: Event) -> SessionMessage | None:
    """The message for an event, or None for kinds the console does not show."""
    kind = _MESSAGE_FOR.get(type(event))
    return kind(event) if kind else None
