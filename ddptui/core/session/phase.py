"""Provides RunPhaseWatch: the run's phase, decided from what the session asks and emits.

One place decides it, so the console's outcome line and headless mode say the same words.
"""

from __future__ import annotations

from ddptui.core.diagnose.stall_events import StallReport
from ddptui.core.events import (
    Event,
    NodeChanged,
    NodeState,
    PhaseChanged,
    RankChanged,
    RankState,
    RunPhase,
    StopReason,
)
from ddptui.core.runs.summary import RunSummary

STALL_DETAIL = "no rank progresses (see Stacks)"


class RunPhaseWatch:
    """The phase one run is in; each method returns the change to emit, or None."""

    def __init__(self) -> None:
        self.phase = RunPhase.NOT_LAUNCHED

    def _to(self, phase: RunPhase, detail: str = "") -> PhaseChanged | None:
        if phase == self.phase or self.phase.final:
            return None
        self.phase = phase
        return PhaseChanged(phase, detail)

    def started(self, attaching: bool) -> PhaseChanged | None:
        return self._to(RunPhase.ATTACHING if attaching else RunPhase.LAUNCHING)

    def teardown_asked(self) -> PhaseChanged | None:
        if self.phase == RunPhase.DETACHING:
            return None
        return self._to(RunPhase.TEARING_DOWN)

    def detach_asked(self) -> PhaseChanged | None:
        return self._to(RunPhase.DETACHING)

    def seen(self, event: Event) -> PhaseChanged | None:
        """The phase an event the session emits moves the run to."""
        phase = self.phase
        match event:
            case NodeChanged(state=NodeState.RUNNING) if phase in (
                RunPhase.LAUNCHING,
                RunPhase.ATTACHING,
            ):
                return self._to(RunPhase.RUNNING)
            case NodeChanged(state=NodeState.STOPPING) if phase != RunPhase.DETACHING:
                return self._to(RunPhase.TEARING_DOWN)
            case StallReport() if phase in (RunPhase.RUNNING, RunPhase.LAUNCHING):
                return self._to(RunPhase.STALLED, STALL_DETAIL)
            case RankChanged(state=RankState.RUNNING) if phase == RunPhase.STALLED:
                return self._to(RunPhase.RUNNING)
        return None

    def ended(self, summary: RunSummary) -> PhaseChanged | None:
        """The last phase, from the run's summary (emitted just before it)."""
        if summary.detached:
            return self._to(RunPhase.DETACHED)
        if summary.ok:
            return self._to(RunPhase.FINISHED)
        if summary.stopped_by == StopReason.OPERATOR:
            return self._to(RunPhase.TORN_DOWN)
        return self._to(RunPhase.FAILED)
