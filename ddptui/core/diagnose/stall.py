"""Provides StallWatch: the job-wide stall (no rank progressed for the hang timeout) and its stacks.

A rank silent while others print is *hung* (rank_checks.py `check_hangs`). When every rank is
silent, nothing compares: the job is *stalled*, every running rank turns amber, and the
session takes every rank's stacks; what they and the flight recorder say comes back here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptui.core.diagnose.flight_recorder import Blocked, analyse, blocked_in, culprits
from ddptui.core.diagnose.stacks import (
    RankStack,
    StackGroup,
    group_stacks,
    is_deadlock,
    ranks_from_report,
    suspects,
)
from ddptui.core.diagnose.stall_events import StacksReport, StackView, StallGroup, StallReport
from ddptui.core.events import (
    Event,
    RankState,
)
from ddptui.core.monitor.board import RankBoard
from ddptui.core.monitor.causes import DEADLOCK, IN_COLLECTIVE, STALLED, SUSPECT

ACTIVE = (RankState.ASSIGNED, RankState.RUNNING, RankState.HUNG)


class StallWatch:
    """Whether the job is stalled, since when, and what the last stacks said."""

    def __init__(self, board: RankBoard) -> None:
        self.board = board
        self.since: float | None = None  # the last progress, while stalled
        self.last: StallReport | None = None
        self._suspects: tuple[int, ...] = ()
        self._groups: tuple[StallGroup, ...] = ()
        self._method = ""
        self._deadlock = False
        self._gaps: tuple[str, ...] = ()
        self._budget = 0.0

    @property
    def stalled(self) -> bool:
        return self.since is not None

    def check(self, now: float, timeout: float) -> list[Event]:
        """Stalled when ranks run (one has printed: start-up is not a stall) and none
        progressed for `timeout` (the job's silence budget, diagnose/rhythm.py; 0: never)."""
        if self.board.tearing_down:
            return []  # the teardown's echo is no progress: the stall stays as it was
        active = [c for c in self.board.all_cells() if c.state in ACTIVE]
        last = self.board.last_progress
        printed = any(c.lines for c in active)
        if timeout <= 0 or not printed or not last or now - last <= timeout:
            return self._clear()
        if self.since is not None:
            return []
        self.since = last
        self._budget = timeout
        self._suspects, self._groups, self._method = (), (), ""
        self._deadlock, self._gaps = False, ()
        events: list[Event] = []
        detail = f"stalled: no rank progressed for {now - last:.0f} s"
        for cell in active:
            if cell.state != RankState.HUNG:
                events += self.board.move(cell, RankState.HUNG, detail=detail)
        return [*events, self._report(now)]

    def _clear(self) -> list[Event]:
        """Progress again: the stall and what its stacks said of each rank are over."""
        if self.since is None:
            return []
        self.since = None
        events: list[Event] = []
        for cell in self.board.all_cells():
            cell.stall_cause = ""
            if cell.suspect:
                cell.suspect = False
                events.append(cell.changed("progress again"))
        return events

    def _report(self, now: float) -> StallReport:
        since = now - (self.since or now)
        report = StallReport(
            since,
            self._suspects,
            self._groups,
            self._method,
            self._deadlock,
            self._gaps,
            self._budget,
            ts=now,
        )
        self.last = report
        return report

    def stacks_taken(
        self, reports: Mapping[str, Mapping[str, Any] | str], now: float
    ) -> list[Event]:
        """What every node's collector sent (or why it could not): read, judged, marked on
        the ranks, reported."""
        taken = _gather(reports)
        judged = _judge(taken)
        events = self._mark(judged)
        return events + self._tell(taken, judged, now)

    def _mark(self, judged: _Judgement) -> list[Event]:
        """Each rank's part in the stall (suspect, in a collective, stalled) on the board."""
        events: list[Event] = []
        for cell in self.board.all_cells():
            if cell.rank is None:
                continue
            suspect = cell.rank in judged.odd
            if self.stalled and judged.deadlock:
                cell.stall_cause = DEADLOCK if suspect else STALLED
            elif self.stalled:
                waiting = cell.rank in judged.waiting
                cell.stall_cause = SUSPECT if suspect else IN_COLLECTIVE if waiting else STALLED
            if suspect != cell.suspect:
                cell.suspect = suspect
                deadlock = judged.deadlock
                why = "deadlock: waits on another group" if deadlock else "suspect: odd stack"
                events.append(cell.changed(why if suspect else ""))
        return events

    def _tell(self, taken: _Taken, judged: _Judgement, now: float) -> list[Event]:
        """The stacks' report, and the stall's again where what it says changed."""
        groups, waits = judged.groups, judged.waits
        texts = tuple(
            (r.rank, r.node, r.local_rank, _text(r.threads)) for r in sorted(taken.ranks, key=_rank)
        )
        views = tuple(
            StackView(g.ranks, g.label, g.stack, g.suspect, waits[g.stack]) for g in groups
        )
        gap_lines = tuple(g.describe() for g in judged.gaps)
        events: list[Event] = [
            StacksReport(
                judged.method,
                views,
                texts,
                gap_lines,
                tuple(taken.problems),
                judged.deadlock,
                tuple(sorted(taken.pyspy)),
                ts=now,
            )
        ]
        self._method = judged.method
        self._suspects = tuple(sorted(judged.odd))
        self._groups = tuple(StallGroup(g.ranks, g.stack, waits[g.stack]) for g in groups)
        self._deadlock, self._gaps = judged.deadlock, gap_lines
        if self.stalled:
            before = self.last
            stall = self._report(now)
            if before is None or _told(before) != _told(stall):
                events.append(stall)
        return events


@dataclass
class _Taken:
    """What the nodes sent: every rank's stack, the methods, the dumps, what went wrong."""

    ranks: list[RankStack] = field(default_factory=list)
    methods: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    dumps: list[Mapping[str, Any]] = field(default_factory=list)
    pyspy: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Judgement:
    """What the stacks and the flight recorder say: groups, suspects, where each group waits."""

    groups: list[StackGroup]
    gaps: list[Any]
    odd: set[int]
    waiting: set[int]
    waits: dict[tuple[str, ...], str]
    deadlock: bool
    method: str


def _gather(reports: Mapping[str, Mapping[str, Any] | str]) -> _Taken:
    taken = _Taken()
    for node, report in reports.items():
        if isinstance(report, str):
            taken.problems.append(f"{node}: {report}")
            continue
        taken.ranks += ranks_from_report(node, report)
        if report.get("ranks"):
            taken.methods.add(str(report.get("method", "")))
        if report.get("pyspy"):
            taken.pyspy.add(str(report["pyspy"]))
        taken.dumps += list(report.get("fr", []))
    return taken


def _judge(taken: _Taken) -> _Judgement:
    gaps = analyse(taken.dumps)
    blocked = blocked_in(taken.dumps)
    # the flight recorder's word is the sharper one: who never entered the collective
    # (and did not wait in another one instead: then the groups wait on each other)
    missing = culprits(gaps, blocked)
    groups = group_stacks(taken.ranks, missing, deadlock=bool(gaps) and not missing)
    waits = {g.stack: "" if set(g.ranks) & missing else _collective(g, blocked) for g in groups}
    method = "+".join(sorted(m for m in taken.methods if m and m != "none")) or "none"
    waiting = {r for g in groups if g.in_collective or waits[g.stack] for r in g.ranks}
    odd = set(suspects(groups))
    return _Judgement(groups, list(gaps), odd, waiting, waits, is_deadlock(groups), method)


def _told(report: StallReport) -> tuple[Any, ...]:
    """What a stall event says, less the time: said again only when this changes."""
    return (report.suspects, report.groups, report.method, report.deadlock, report.flight_recorder)


def _collective(group: StackGroup, blocked: Mapping[int, Blocked]) -> str:
    """Where the group's ranks wait, if the flight recorder saw every one wait in the same
    (on a GPU a rank may wait in `synchronize`, outside torch.distributed's frames)."""
    where = {blocked.get(rank) for rank in group.ranks}
    one = where.pop() if len(where) == 1 else None
    return one.describe() if one is not None else ""


def _rank(stack: Any) -> int:
    return int(stack.rank)


def _text(threads: Any) -> str:
    return "\n\n".join(f"{t.name}\n" + "\n".join(f"  {f}" for f in t.frames) for t in threads)
