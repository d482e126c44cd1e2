"""Provides a run's attempts: each time its job ran again (a torchrun restart round, a Slurm
requeue, the operator's relaunch), when each began and ended and how.

A run is a tree: the run, its attempts, their nodes, their ranks. The first attempt is the
launch. torchrun restarting the worker group (a new rendezvous round, `CycleReport`) begins
the next attempt of the same session; so does Slurm requeueing a batch job (the same job
id run again, `AllocationChanged("requeued")`), whose first round belongs to the requeue,
not to a restart. The operator's relaunch of the same job (`ddptui run --again RUN_ID`, or
launch again on the same job screen) is a session and a run directory of its own, marked
as an attempt of the first run (`RunDir.mark_attempt_of`): history folds it into that run.

`AttemptBook` decides, from the recorded events, once: the history stores its list, the
session tells each new attempt as an `attempt` event, and history's surfaces draw them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

from ddptui.core.events import AllocationChanged, Event
from ddptui.core.monitor.cycles import CycleReport


class AttemptCause(enum.StrEnum):
    """Why an attempt began."""

    LAUNCH = "launch"  # the run's first
    RESTART = "restart"  # torchrun restarted the worker group: a new rendezvous round
    REQUEUE = "requeue"  # Slurm requeued the batch job: the same job id runs again
    RELAUNCH = "relaunch"  # the operator launched the same job again


# A round of a fresh torchrun (restart count 0) this soon before Slurm's requeue is told
# is the requeue's own first round, seen before the requeue (the nodes' logs and squeue are
# read apart), not a restart of the workers.
REQUEUE_LAG_S = 120.0

# How an attempt that the next one replaced ended (a run's last attempt ends as the run does:
# ok, failed, torn down, error, interrupted; one still going is `running` or `detached`).
RESTARTED, REQUEUED, RELAUNCHED = "restarted", "requeued", "relaunched"


@dataclass(frozen=True)
class Attempt:
    """One attempt of a run.

    `index` counts from 1; `why` says why it began (a round's cause, Slurm's requeue, the
    run it relaunched); `outcome` how it ended ("" while it runs) and `detail` in a line;
    `run_id` the run directory it ran in; `round` the torchrun round it began with (None
    until its first round is seen) and `requeue` Slurm's restart count when it began, which
    tell an attempt already booked from one seen again (a console that attaches reads the
    nodes' logs from their start); `torchrun_restarts` the restart count torchrun's agents
    gave that round.
    """

    index: int
    cause: AttemptCause
    started: float
    run_id: str
    ended: float | None = None
    outcome: str = ""
    detail: str = ""
    why: str = ""
    round: int | None = None
    requeue: int = 0
    torchrun_restarts: int = 0

    @property
    def duration(self) -> float | None:
        return None if self.ended is None else self.ended - self.started

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["cause"] = self.cause.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        names = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in names}
        values["cause"] = AttemptCause(values.get("cause", AttemptCause.LAUNCH))
        return cls(**values)


@dataclass(frozen=True)
class AttemptStarted(Event):
    """The run's job runs again: `{"event": "attempt", "attempt": {...}, "previous": {...}}`,
    the new attempt and the one it ended (None for the first)."""

    attempt: Attempt
    previous: Attempt | None = None

    kind = "attempt"


class AttemptBook:
    """A run's attempts, kept as its events go by; `seen` says which began."""

    def __init__(self, run_id: str, attempts: list[Attempt]) -> None:
        self.run_id = run_id
        self.attempts = attempts

    @classmethod
    def launched(
        cls,
        run_id: str,
        started: float,
        cause: AttemptCause = AttemptCause.LAUNCH,
        index: int = 1,
        why: str = "",
    ) -> AttemptBook:
        """A new run's book, its first attempt begun (a relaunch's counts on from `index`)."""
        return cls(run_id, [Attempt(index, cause, started, run_id, why=why)])

    @property
    def current(self) -> Attempt:
        return self.attempts[-1]

    def _last_round(self) -> int:
        return max((a.round for a in self.attempts if a.round is not None), default=-1)

    def seen(self, event: Event) -> list[AttemptStarted]:
        """The attempt an event begins, if it begins one (a round or a requeue seen before,
        replayed from the logs by a console that attaches, begins none)."""
        match event:
            case CycleReport(cycle=cycle) if cycle.index > self._last_round():
                if self.current.round is None:  # the launch's, or a requeue's first round
                    self.attempts[-1] = replace(
                        self.current, round=cycle.index, torchrun_restarts=cycle.restarts
                    )
                    return []
                return [
                    self._next(
                        AttemptCause.RESTART,
                        event.ts,
                        RESTARTED,
                        why=cycle.cause,
                        round=cycle.index,
                        requeue=self.current.requeue,
                        torchrun_restarts=cycle.restarts,
                    )
                ]
            case AllocationChanged(state="requeued", job_id=job) if (
                event.restarts > self.current.requeue
                and all(a.requeue < event.restarts for a in self.attempts)
            ):
                why = f"Slurm requeued job {job} (restart {event.restarts})"
                current = self.current
                if (
                    current.cause == AttemptCause.RESTART
                    and current.torchrun_restarts == 0
                    and event.ts - current.started < REQUEUE_LAG_S
                ):  # its first round came first: that attempt is the requeue's
                    began = replace(
                        current, cause=AttemptCause.REQUEUE, why=why, requeue=event.restarts
                    )
                    previous = replace(self.attempts[-2], outcome=REQUEUED, detail=why)
                    self.attempts[-2:] = [previous, began]
                    return [AttemptStarted(began, previous, ts=event.ts)]
                return [self._next(AttemptCause.REQUEUE, event.ts, REQUEUED, why, event.restarts)]
        return []

    def _next(
        self,
        cause: AttemptCause,
        ts: float,
        ended_as: str,
        why: str,
        requeue: int,
        round: int | None = None,
        torchrun_restarts: int = 0,
    ) -> AttemptStarted:
        previous = replace(self.current, ended=ts, outcome=ended_as, detail=why)
        attempt = Attempt(
            previous.index + 1,
            cause,
            ts,
            self.run_id,
            why=why,
            round=round,
            requeue=requeue,
            torchrun_restarts=torchrun_restarts,
        )
        self.attempts[-1:] = [previous, attempt]
        return AttemptStarted(attempt, previous, ts=ts)

    def finish(self, outcome: str, detail: str, ended: float | None) -> None:
        """The run ended (its last attempt with it), or was left detached (it goes on)."""
        if ended is None:
            return
        self.attempts[-1] = replace(self.current, ended=ended, outcome=outcome, detail=detail)


def attempts_of_row(
    stored: list[Attempt],
    run_id: str,
    started: float,
    ended: float | None,
    status: str,
    detail: str,
) -> list[Attempt]:
    """A history row's attempts as they are shown: a row written before attempts were kept
    has one, its launch; a last attempt that did not say how it ended (its console died, a
    detached run settled later) ends as its run did."""
    attempts = list(stored) or [Attempt(1, AttemptCause.LAUNCH, started, run_id)]
    last = attempts[-1]
    if not last.outcome:
        lead = detail.split("\n", 1)[0]
        attempts[-1] = replace(last, ended=ended, outcome=status, detail=last.detail or lead)
    return attempts


def renumbered(attempts: list[Attempt], first: int = 1) -> list[Attempt]:
    return [replace(a, index=first + i) for i, a in enumerate(attempts)]


def attempts_text(attempts: list[Attempt] | tuple[Attempt, ...]) -> str:
    """`2` or `2 (1 requeue)`, for a table's cell: how many, and what made the others."""
    again = [a.cause for a in attempts if a.cause != AttemptCause.LAUNCH]
    if not again:
        return str(len(attempts))
    kinds = {c: again.count(c) for c in dict.fromkeys(again)}
    words = ", ".join(f"{n} {c.value}{'s' if n > 1 else ''}" for c, n in kinds.items())
    return f"{len(attempts)} ({words})"
