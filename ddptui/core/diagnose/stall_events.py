"""Provides the stall's events: the stall itself (the headless contract) and every rank's stacks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddptui.core.events import Event


@dataclass(frozen=True)
class StallGroup:
    """Ranks standing in the same frames, and the collective they wait in, if known."""

    ranks: tuple[int, ...]
    stack: tuple[str, ...]  # the main thread's frames, innermost first
    collective: str = ""  # "collective 4 (gloo:all_reduce) of group 0"


@dataclass(frozen=True)
class StallReport(Event):
    """No rank progressed for the hang timeout: the job is stalled. The headless contract:
    `{"event": "stall", "ts", "since_s", "suspects", "groups": [{"ranks", "stack"}], "method"}`,
    sent again whenever it changes (the stacks came, the suspects changed). Beyond it: each
    group's `collective` (where the flight recorder saw its ranks wait, "" if unknown),
    `deadlock` (groups wait on each other in different collectives: every one a suspect)
    and `flight_recorder` (the collectives some ranks never entered); `budget_s`, the silence
    the job's rhythm allowed it (diagnose/rhythm.py: at least `--hang-timeout`)."""

    since_s: float
    suspects: tuple[int, ...] = ()
    groups: tuple[StallGroup, ...] = ()
    method: str = ""
    deadlock: bool = False
    flight_recorder: tuple[str, ...] = ()
    budget_s: float = 0.0

    kind = "stall"
    followed = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "ts": self.ts,
            "since_s": round(self.since_s, 1),
            "suspects": list(self.suspects),
            "groups": [
                {"ranks": list(g.ranks), "stack": list(g.stack), "collective": g.collective}
                for g in self.groups
            ],
            "method": self.method,
            "deadlock": self.deadlock,
            "flight_recorder": list(self.flight_recorder),
            "budget_s": round(self.budget_s, 1),
        }


@dataclass(frozen=True)
class StackView:
    """One group of ranks standing in the same frames, as the console shows it."""

    ranks: tuple[int, ...]
    label: str  # "all_reduce <- main (hang.py:63)"
    stack: tuple[str, ...]
    suspect: bool = False
    collective: str = ""  # where the flight recorder saw them wait, if it did


@dataclass(frozen=True)
class StacksReport(Event):
    """Every rank's stacks, taken on a stall or on request, with the flight recorder's word.

    `ranks` maps a rank to its whole dump (every thread) for the console's stack view;
    `collectives` says which ranks never entered which collective.
    """

    method: str
    groups: tuple[StackView, ...]
    ranks: tuple[tuple[int, str, int, str], ...] = ()  # (rank, node, local rank, full text)
    collectives: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # nodes whose stacks could not be taken, and why
    deadlock: bool = False  # the groups wait on each other in different collectives
    pyspy: tuple[str, ...] = ()  # what the nodes said of py-spy: "used", why not

    kind = "stacks"
    followed = True


@dataclass(frozen=True)
class FlightRecorderReport(Event):
    """Every node's flight-recorder dumps, gathered on a watchdog timeout or at the teardown of
    a stuck job, and what they say: the collectives some ranks never entered (those ranks are
    the suspects), where the others wait, and whether the groups wait on each other."""

    trigger: str  # "watchdog" | "teardown"
    collectives: tuple[str, ...] = ()  # "rank 1 never entered collective 5 (...) of group 0"
    suspects: tuple[int, ...] = ()  # ranks missing from a collective, waiting in none
    waiting: tuple[tuple[tuple[int, ...], str], ...] = ()  # (ranks, "collective 5 (...)")
    deadlock: bool = False
    dumps: int = 0  # how many ranks' dumps were read
    problems: tuple[str, ...] = ()  # nodes whose dumps could not be gathered, and why

    kind = "flight_recorder"
    followed = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "ts": self.ts,
            "trigger": self.trigger,
            "collectives": list(self.collectives),
            "suspects": list(self.suspects),
            "waiting": [{"ranks": list(r), "collective": c} for r, c in self.waiting],
            "deadlock": self.deadlock,
            "dumps": self.dumps,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class QuietPhase(Event):
    """The job went quiet in a phase of its own rhythm (a checkpoint, an evaluation): no stall
    while it lasts its budget. Sent when it begins (`ended` None) and when it ends; `began`
    and `ended` are the ranks' last and first progress around it, so `ended - began` is the
    time the phase took. `label` is what the line before it names ("checkpoint",
    "evaluation", else "quiet"), `cue` that line, `budget_s` how long it may last before it
    is a stall (its longest seen times a margin, or the first time a multiple of the floor)."""

    ranks: tuple[int, ...]
    began: float
    ended: float | None = None
    label: str = "quiet"
    budget_s: float = 0.0
    cue: str = ""

    kind = "quiet_phase"
    followed = True


@dataclass(frozen=True)
class StepBudget:
    """One rank's silence budget in the step loop: its step interval times a factor, at least
    the floor."""

    rank: int
    interval_s: float
    budget_s: float


@dataclass(frozen=True)
class StepBudgets(Event):
    """The ranks' learned silence budgets in the step loop, sent when one changes by more than
    a tenth: how long each may print nothing before it is hung (and the job, stalled)."""

    floor_s: float
    ranks: tuple[StepBudget, ...] = ()

    kind = "step_budgets"
    followed = True
