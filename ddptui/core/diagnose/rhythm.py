"""Provides JobRhythm: each rank's step interval and the job's quiet phases, learned as it runs.

A fixed `--hang-timeout` is wrong both ways: a checkpoint that writes for three minutes
without a line is called a stall, while a step loop of one step a second that stops is named
only minutes later. The rhythm gives every rank a silence budget from what the job has shown:

- in the step loop, `STEP_FACTOR` times the rank's step interval (the median gap between its
  progress lines, else between its lines);
- in a quiet phase (the whole job silent after a line that names it, or after a line that
  came before such a silence already), the phase's longest length seen times
  `PHASE_MARGIN`; the first time, a line that names a checkpoint or an evaluation gets
  `FIRST_PHASE_FACTOR` floors.

The operator's `--hang-timeout` is the floor under every budget. A step line is never a
phase's cue, nor a line the loop has gone on after at once: a hang right after one keeps the
step budget, however long the checkpoints are. A quiet phase is the whole job's (the others
wait in a barrier while one saves); one rank silent while the others step keeps its step
budget.
Pure logic: the monitor feeds it what the ranks printed and when, and asks it the budgets.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median

from ddptui.core.diagnose.stall_events import QuietPhase, StepBudget, StepBudgets
from ddptui.core.events import Event

STEP_FACTOR = 5.0  # a rank's budget in the step loop: this many step intervals
PHASE_MARGIN = 1.5  # a phase seen before may last its longest length times this
# A phase that began this soon after the first line heard may have begun before it: a console
# that attaches in the middle of a checkpoint reads the logs back at once, so the cue comes
# with the rest and the phase's length from there is only what was left of it. Such a phase
# teaches no length (the next one is budgeted as a first one again).
CATCH_UP_S = 5.0
FIRST_PHASE_FACTOR = 5.0  # a named phase not seen yet may last this many floors
QUIET_FACTOR = 3.0  # the job is quiet once silent this many step intervals
QUIET_MIN_S = 5.0  # and at least this long
MIN_GAPS = 3  # gaps a rank must have shown before its interval counts
GAPS_KEPT = 32  # the recent gaps an interval is the median of
RETAKE = 8  # gaps added before the interval is taken again
RETELL = 0.1  # step budgets are told again when one moves by more than this fraction
RETELL_S = 10.0  # and at most this often (a big job's intervals jitter, one rank or another)
CUE_CHARS = 160  # the part of a cue line that identifies a phase

LABELS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("checkpoint", re.compile(r"checkpoint|ckpt|snapshot|\bsav(?:e|es|ed|ing)\b", re.I)),
    ("evaluation", re.compile(r"\beval|validat", re.I)),
)
_CLUES = ("check", "ckpt", "snapshot", "sav", "eval", "validat")  # each label's words hold one
_NO_DIGITS = str.maketrans("", "", "0123456789")

Key = Hashable  # a rank's place in the job: (node, local rank)


def label_of(line: str) -> str:
    """The phase a line names ("checkpoint", "evaluation"), or "" if it names none."""
    lowered = line.lower()
    if not any(clue in lowered for clue in _CLUES):  # most lines: no regex at all
        return ""
    for label, words in LABELS:
        if words.search(line):
            return label
    return ""


def cue_key(line: str) -> str:
    """What identifies a line as a phase's cue: the line without its digits (`[rank0] saving
    checkpoint at step 200` and `[rank3] ... step 400` are the same cue). One translate, no
    regex: it is taken of a rank's lines as the loop goes on, once a phase is learned."""
    return line.strip().translate(_NO_DIGITS)[:CUE_CHARS]


@dataclass
class PhaseSeen:
    """A quiet phase the job has been through: what it is called and its longest length."""

    label: str
    longest: float
    times: int = 1


@dataclass(frozen=True)
class Phase:
    """The job's quiet phase now: since when, after which line, and its budget."""

    began: float
    label: str
    cue: str
    budget: float
    keys: frozenset[Key]
    ranks: tuple[int, ...]
    seen: bool  # learned from an earlier one (else the first of a named phase)


@dataclass
class _Stretch:
    """A silence of the whole job that no cue explained: learned if it ends."""

    began: float
    key: str
    line: str


@dataclass
class RankRhythm:
    """One rank: when it last progressed, its last line, the gaps between its steps."""

    rank: int | None = None
    last: float = 0.0  # its last progress (a step, a line of its own)
    line: str = ""  # its last line
    last_step: float = 0.0  # its last progress line
    step_gaps: deque[float] = field(default_factory=lambda: deque(maxlen=GAPS_KEPT))
    line_gaps: deque[float] = field(default_factory=lambda: deque(maxlen=GAPS_KEPT))
    told: float = 0.0  # the step budget last told
    told_interval: float = 0.0  # and the interval (0: none known then)
    _interval: float | None = None
    _added: int = 0  # gaps added since the interval was taken

    def add(self, gaps: deque[float], gap: float) -> None:
        gaps.append(gap)
        self._added += 1

    @property
    def interval(self) -> float | None:
        """The rank's step interval: the median gap between its progress lines, else between
        its lines (a script that prints no step pattern); None until it has shown enough.
        Taken again every few gaps, not on each (a rank's step costs the console little)."""
        if self._added >= RETAKE or (self._interval is None and self._added):
            self._added = 0
            self._interval = next(
                (median(g) for g in (self.step_gaps, self.line_gaps) if len(g) >= MIN_GAPS), None
            )
        return self._interval

    def quiet_after(self) -> float:
        """How long a silence must last to be more than a gap of the step loop."""
        interval = self.interval
        return QUIET_MIN_S if interval is None else max(QUIET_MIN_S, QUIET_FACTOR * interval)


class JobRhythm:
    """Every rank's rhythm and the job's quiet phases: the silence budgets the stall judge
    and the hung-rank check apply."""

    def __init__(self, is_step: Callable[[str], bool] = lambda line: False) -> None:
        """`is_step`: whether a line reports a step (the job's progress pattern): such a line
        belongs to the step loop and is never a phase's cue."""
        self.is_step = is_step
        self.ranks: dict[Key, RankRhythm] = {}
        self.seen: dict[str, PhaseSeen] = {}  # cue key -> the phase it came before
        self.phase: Phase | None = None
        self.ended: Phase | None = None  # the last phase over (its ranks not all back yet)
        self.phases: list[QuietPhase] = []  # every phase begun, as last told
        self._stretch: _Stretch | None = None
        self._floor_told: float | None = None
        self._told_at = float("-inf")
        self._ordinary: set[str] = set()  # cues seen right before the loop went on
        self._first: float | None = None  # when the first line was heard

    # -- what the ranks print -------------------------------------------------------------

    def spoke(
        self, key: Key, rank: int | None, now: float, line: str, stepped: bool = False
    ) -> list[Event]:
        """A rank progressed (a step, a line of its own) at `now`, its last line `line`;
        `stepped`: among its lines was a progress line. Ends the job's quiet phase."""
        if self._first is None:
            self._first = now
        r = self.ranks.get(key)
        if r is None:
            r = self.ranks[key] = RankRhythm(rank)
        if rank is not None:
            r.rank = rank
        # until an interval is known every gap counts (a loop of 10 s steps must be learned)
        quiet = r.quiet_after()
        limit = quiet if r.interval is not None else float("inf")
        gap = now - r.last
        if r.last and 0 <= gap < limit:
            r.add(r.line_gaps, gap)
        if r.last and gap < quiet and r.line and (self.seen or label_of(r.line)):
            key = cue_key(r.line)  # a cue the loop went on after at once is the loop's own
            if key in self.seen or label_of(r.line):
                self._ordinary.add(key)
        if stepped:
            if r.last_step and 0 <= now - r.last_step < limit:
                r.add(r.step_gaps, now - r.last_step)
            r.last_step = now
        r.last = max(r.last, now)
        r.line = line or r.line
        return self._ended(now)

    def _ended(self, now: float) -> list[Event]:
        """The job progressed: its phase (or an unexplained silence) is over, and learned."""
        phase, stretch = self.phase, self._stretch
        if phase is not None and now > phase.began:
            self.phase, self.ended = None, phase
            if self._first is None or phase.began - self._first >= CATCH_UP_S:
                self._learn(cue_key(phase.cue), phase.label, now - phase.began)
            ended = QuietPhase(
                phase.ranks, phase.began, now, phase.label, phase.budget, phase.cue, ts=now
            )
            self.phases[-1] = ended
            return [ended]
        if stretch is not None and now > stretch.began:
            self._stretch = None
            if stretch.key:
                self._learn(stretch.key, "quiet", now - stretch.began)
        return []

    def _learn(self, key: str, label: str, length: float) -> None:
        seen = self.seen.get(key)
        if seen is None:
            self.seen[key] = PhaseSeen(label, length)
        else:
            seen.longest = max(seen.longest, length)
            seen.times += 1

    # -- what time says -------------------------------------------------------------------

    def tick(self, now: float, floor: float, active: Iterable[Key]) -> list[Event]:
        """The job's quiet phase begins once every active rank has been silent longer than
        a gap of its step loop, after a line that names or came before a phase; and the
        step budgets, told when one moved."""
        ranks = [(k, self.ranks[k]) for k in active if k in self.ranks]
        events = self._budgets(now, floor, ranks)
        if not ranks or self.phase is not None:
            return events
        last = max(r.last for _, r in ranks)
        quiet = max(r.quiet_after() for _, r in ranks)
        if now - last <= quiet or (self._stretch is not None and self._stretch.began == last):
            return events
        recent = sorted((r for _, r in ranks if r.last >= last - quiet), key=_newest)
        phase = self._recognise(recent, last, floor, ranks)
        if phase is None:
            return events
        self.phase = phase
        began = QuietPhase(
            phase.ranks, phase.began, None, phase.label, phase.budget, phase.cue, ts=now
        )
        self.phases.append(began)
        return [*events, began]

    def _recognise(
        self,
        recent: Sequence[RankRhythm],
        last: float,
        floor: float,
        ranks: Sequence[tuple[Key, RankRhythm]],
    ) -> Phase | None:
        """The phase the ranks' last lines say the job is in, or None (an unexplained
        silence, kept to be learned if it ends)."""
        keys = frozenset(k for k, _ in ranks)
        numbers = tuple(sorted(r.rank for _, r in ranks if r.rank is not None))
        lines = [r.line for r in recent if r.line]
        for line in lines:  # a cue seen before, and never before a gap of the loop
            key = cue_key(line)
            seen = self.seen.get(key)
            if seen is not None and key not in self._ordinary:
                budget = max(floor, seen.longest * PHASE_MARGIN)
                return Phase(last, seen.label, line, budget, keys, numbers, True)
        for line in lines:  # a line that names a phase: seen under another cue, or new
            label = label_of(line)
            if not label or cue_key(line) in self._ordinary:
                continue
            longest = [s.longest for s in self.seen.values() if s.label == label]
            if longest:
                budget = max(floor, max(longest) * PHASE_MARGIN)
                return Phase(last, label, line, budget, keys, numbers, True)
            return Phase(last, label, line, floor * FIRST_PHASE_FACTOR, keys, numbers, False)
        # another line: learned as a phase's cue if the silence ends; a step line never is
        line = next((line for line in lines if not self.is_step(line)), "")
        self._stretch = _Stretch(last, cue_key(line) if line else "", line)
        return None

    def _budgets(
        self, now: float, floor: float, ranks: Sequence[tuple[Key, RankRhythm]]
    ) -> list[Event]:
        """A StepBudgets event when a rank's step budget or interval moved by more than
        RETELL (or the floor changed), at most every RETELL_S: rare, as intervals settle."""
        if floor <= 0 or not ranks:  # no budgets while the checks are off
            return []
        moved = self._floor_told != floor
        if not moved and now - self._told_at < RETELL_S:
            return []
        for _, r in ranks:
            budget = self._step_budget(r, floor)
            if _moved(budget, r.told) or _moved(r.interval or 0.0, r.told_interval):
                moved = True
        if not moved:
            return []
        self._floor_told, self._told_at = floor, now
        told: list[StepBudget] = []
        for _, r in sorted(ranks, key=lambda kr: (kr[1].rank is None, kr[1].rank or 0)):
            r.told = self._step_budget(r, floor)
            interval = r.interval
            r.told_interval = interval or 0.0
            if r.rank is not None and interval is not None:
                told.append(StepBudget(r.rank, round(interval, 3), round(r.told, 1)))
        return [StepBudgets(floor, tuple(told))]

    # -- what the judges ask --------------------------------------------------------------

    @staticmethod
    def _step_budget(r: RankRhythm, floor: float) -> float:
        interval = r.interval
        return floor if interval is None else max(floor, STEP_FACTOR * interval)

    def budget(self, key: Key, floor: float) -> float:
        """How long this rank may print nothing before it is hung: its phase's budget while
        the job is in one (or the phase just over, until the rank itself prints again: the
        first rank back ends the phase, the others' lines may come a tick later), else its
        step budget; never less than the floor."""
        r = self.ranks.get(key)
        for phase in (self.phase, self.ended):
            if phase is None or key not in phase.keys:
                continue
            if phase is self.phase or (r is not None and r.last <= phase.began):
                return max(floor, phase.budget)
        return floor if r is None else self._step_budget(r, floor)

    def job_budget(self, floor: float, active: Iterable[Key]) -> float:
        """How long the whole job may print nothing before it is stalled: the largest of its
        active ranks' budgets (one within its budget explains the others' wait)."""
        return max((self.budget(k, floor) for k in active), default=floor)

    def phase_of(self, key: Key) -> Phase | None:
        """The quiet phase this rank is in, if the job is in one."""
        phase = self.phase
        return phase if phase is not None and key in phase.keys else None


def _moved(value: float, told: float) -> bool:
    return abs(value - told) > RETELL * told if told else value > 0


def _newest(r: RankRhythm) -> float:
    return -r.last


@dataclass(frozen=True)
class RankPhase:
    """Where a rank stands in the job's rhythm, as the console shows it: the step loop (its
    budget, from its interval) or the job's quiet phase (since `began`)."""

    label: str  # "step loop", or the quiet phase's: "checkpoint", "evaluation", "quiet"
    budget_s: float
    began: float | None = None  # the quiet phase's start (None: the step loop)
    interval_s: float | None = None  # the rank's step interval, in the step loop

    def left(self, now: float) -> float | None:
        """The quiet phase's budget left at `now` (None in the step loop: it restarts with
        every step)."""
        return None if self.began is None else self.budget_s - (now - self.began)


def rank_phase(
    rank: int | None, quiet: QuietPhase | None, budgets: StepBudgets | None
) -> RankPhase | None:
    """The phase a rank is in from the events that say it: the job's quiet phase (the last
    `quiet_phase`, while not ended) if the rank is in it, else its step budget (the last
    `step_budgets`); None until either says anything of it."""
    if rank is None:
        return None
    if quiet is not None and quiet.ended is None and rank in quiet.ranks:
        return RankPhase(quiet.label, quiet.budget_s, quiet.began)
    if budgets is None:
        return None
    own = next((b for b in budgets.ranks if b.rank == rank), None)
    if own is None:
        return RankPhase("step loop", budgets.floor_s)
    return RankPhase("step loop", own.budget_s, interval_s=own.interval_s)
