"""Provides GoodputAccount: where a run's wall time went, in parts adding up to it, from its events.

A run's wall time runs from the session's first event to its summary. Every moment of it is
in exactly one part:

- **stepping**: the ranks step (productive);
- **launch**: from the session's start to the first step (allocation, the agents'
  rendezvous, the workers' start);
- **restart**: from a failure or a restart of the worker group to the next round's first step;
- **stalled**: a stall, from the ranks' last progress (the stall's `since_s` back from when it
  was said) until a rank progresses again;
- **straggler**: the share of stepping the others spend waiting for a straggler, as its
  scores measure it (its peers' wait a step over the step's length);
- **phases**: a quiet phase of the job's rhythm (a checkpoint, an evaluation), as the phase
  watch says it (`QuietPhase`);
- **teardown**: from the run's end (the operator's stop, the failure that ended it, the last
  agent's exit, a detach) to the summary;
- **detached**: no console followed the run: from a detached console's summary to the next
  attach. An attached console carries the account of the stretches before it (`carry`), so a
  run's parts add up to its wall time from its launch, however often it was re-attached.

The first step of a round is its first progress or metric line; a round with none steps from
its first rank's first line, unless an earlier round printed steps (then it never stepped).

The parts are worked out again from the marks the events left (when each attempt began, ran,
stepped and broke; the stalls, quiet phases and straggler spans), so a fact that arrives late
(a stall said after `--hang-timeout`) moves the time it covers, and the parts always add up to
the wall time. An attempt is a torchrun restart round: attempt N+1 begins where attempt N broke.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ddptui.core.diagnose.speed import StragglerReport
from ddptui.core.diagnose.stall_events import QuietPhase, StallReport
from ddptui.core.events import (
    Event,
    MetricSampled,
    NodeChanged,
    NodeState,
    PhaseChanged,
    RankChanged,
    RankState,
    RunPhase,
)
from ddptui.core.monitor.cycles import CycleReport

SHARE_STEP = 0.01  # a part's share moving this much is news (a goodput event) ...
REPORT_EVERY_S = 5.0  # ... at most this often; the part accruing now changing is news at once
ENDED_NODE = (NodeState.EXITED, NodeState.FAILED, NodeState.STOPPED, NodeState.DETACHED)
STARTED_NODE = (NodeState.LAUNCHED, NodeState.RUNNING)


class Part(enum.StrEnum):
    """Where a moment of the run's wall time went (the order the console draws them in)."""

    STEPPING = "stepping"
    LAUNCH = "launch"
    RESTART = "restart"
    STALLED = "stalled"
    STRAGGLER = "straggler"
    PHASES = "phases"
    TEARDOWN = "teardown"
    DETACHED = "detached"

    @property
    def words(self) -> str:
        return PART_WORDS[self]


PART_WORDS = {
    Part.STEPPING: "stepping",
    Part.LAUNCH: "launch",
    Part.RESTART: "restart",
    Part.STALLED: "stalled",
    Part.STRAGGLER: "straggler",
    Part.PHASES: "ckpt/eval",
    Part.TEARDOWN: "teardown",
    Part.DETACHED: "detached",
}


@dataclass(frozen=True)
class GoodputSplit:
    """Seconds in each part (one field per `Part`, by its value)."""

    stepping: float = 0.0
    launch: float = 0.0
    restart: float = 0.0
    stalled: float = 0.0
    straggler: float = 0.0
    phases: float = 0.0
    teardown: float = 0.0
    detached: float = 0.0

    @classmethod
    def of(cls, seconds: dict[Part, float]) -> GoodputSplit:
        return cls(**{part.value: seconds.get(part, 0.0) for part in Part})

    def seconds(self, part: Part) -> float:
        return float(getattr(self, part.value))

    @property
    def total(self) -> float:
        return sum(self.seconds(part) for part in Part)

    def plus(self, *others: GoodputSplit, detached: float = 0.0) -> GoodputSplit:
        """These parts and the others', with `detached` seconds more of that part."""
        seconds = {p: self.seconds(p) + sum(o.seconds(p) for o in others) for p in Part}
        seconds[Part.DETACHED] += detached
        return GoodputSplit.of(seconds)

    def share(self, part: Part) -> float:
        total = self.total
        return self.seconds(part) / total if total > 0 else 0.0


@dataclass(frozen=True)
class AttemptGoodput:
    """One attempt (a torchrun restart round) of the run: when it began and ended, its parts."""

    index: int
    began: float
    ended: float
    parts: GoodputSplit


@dataclass(frozen=True)
class Goodput:
    """A run's wall time (`began` to `ended`) in parts, and each attempt's."""

    began: float
    ended: float
    parts: GoodputSplit = field(default_factory=GoodputSplit)
    attempts: tuple[AttemptGoodput, ...] = ()

    @property
    def wall_s(self) -> float:
        return max(0.0, self.ended - self.began)

    @property
    def fraction(self) -> float:
        """The goodput: the share of the wall time the ranks stepped."""
        return self.parts.share(Part.STEPPING)

    def to_dict(self) -> dict[str, Any]:
        """`{"began", "ended", "wall_s", "goodput", "parts": {part: s}, "attempts": [...]}`."""

        def parts(split: GoodputSplit) -> dict[str, float]:
            return {part.value: split.seconds(part) for part in Part}

        return {
            "began": self.began,
            "ended": self.ended,
            "wall_s": self.wall_s,
            "goodput": round(self.fraction, 4),
            "parts": parts(self.parts),
            "attempts": [
                {"index": a.index, "began": a.began, "ended": a.ended, "parts": parts(a.parts)}
                for a in self.attempts
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Goodput:
        """Read back from `to_dict`'s form (a history row, a summary file)."""

        def parts(raw: Any) -> GoodputSplit:
            raw = raw if isinstance(raw, dict) else {}
            return GoodputSplit.of({p: float(raw.get(p.value, 0.0)) for p in Part})

        attempts = tuple(
            AttemptGoodput(int(a["index"]), float(a["began"]), float(a["ended"]), parts(a["parts"]))
            for a in data.get("attempts", ())
        )
        return cls(float(data["began"]), float(data["ended"]), parts(data["parts"]), attempts)


@dataclass(frozen=True)
class GoodputReport(Event):
    """The split moved meaningfully: `{"event": "goodput", "goodput": {...}, "current": part}`
    (`current`: the part the time goes to now). Said when the part accruing changes, and when
    a part's share moved by SHARE_STEP, at most every REPORT_EVERY_S; the summary carries the
    final split."""

    goodput: Goodput
    current: Part

    kind = "goodput"
    followed = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "ts": self.ts,
            "current": self.current.value,
            "goodput": self.goodput.to_dict(),
        }


def bar_cells(split: GoodputSplit, cells: int) -> tuple[Part, ...]:
    """The parts as `cells` cells of a bar, in `Part` order, each part's count its share
    rounded by largest remainder (a part with any time but under a cell gets none)."""
    total = split.total
    if total <= 0 or cells <= 0:
        return ()
    exact = {part: split.seconds(part) / total * cells for part in Part}
    counts = {part: int(value) for part, value in exact.items()}
    left = cells - sum(counts.values())
    for part in sorted(Part, key=lambda p: counts[p] - exact[p])[:left]:
        counts[part] += 1
    return tuple(part for part in Part for _ in range(counts[part]))


def lost_words(split: GoodputSplit, least: float = 0.005) -> str:
    """Where the time that was not stepping went, biggest first: `launch 20% · restart 8%`."""
    lost = [(split.share(p), p) for p in Part if p != Part.STEPPING and split.share(p) >= least]
    lost.sort(key=lambda item: -item[0])
    return " · ".join(f"{part.words} {share:.0%}" for share, part in lost)


@dataclass
class _Attempt:
    """What the events said of one attempt, as it goes."""

    began: float
    running: float | None = None  # a rank's first line
    step: float | None = None  # the first step
    broke: float | None = None  # the first failure
    awaiting: bool = False  # its group restarts: its round has not begun yet


@dataclass
class _Span:
    """A stretch of time an overlay covers (`end` None: it still holds); `value`: a
    straggler's drag (the share of each step its peers wait), a quiet phase's budget; `said`:
    when the event that began it came."""

    start: float
    end: float | None = None
    value: float = 1.0
    said: float = 0.0


class GoodputAccount:
    """The run's parts as the session's events arrive; `seen` and `tick` say what changed."""

    def __init__(self) -> None:
        self.began: float | None = None
        self.now = 0.0
        self.ended: float | None = None
        self.attempts: list[_Attempt] = []
        self.round = 0
        self.stalls: list[_Span] = []
        self.quiet: list[_Span] = []
        self.drags: list[_Span] = []
        self.teardown: float | None = None
        self._started: set[str] = set()
        self._ended_nodes: set[str] = set()
        self._last: GoodputReport | None = None
        self._before: Goodput | None = None

    def carry(self, before: Goodput) -> None:
        """An attached console's account goes on from the run's account when the console
        before it detached: the time between is `detached`, its attempts are carried on."""
        self._before = before

    # -- reading -----------------------------------------------------------------------------

    def split(self, until: float | None = None) -> Goodput:
        """The parts from the run's launch (the first event, or the carried account's start)
        to `until` (default: the latest event's time)."""
        own = self._own_split(until)
        return own if self._before is None else _joined(self._before, own)

    def _own_split(self, until: float | None = None) -> Goodput:
        """The parts of this console's stretch, from its first event to `until`."""
        began = self.began if self.began is not None else (until or 0.0)
        end = max(began, until if until is not None else self.now)
        if end <= began or not self.attempts:
            return Goodput(began, end, GoodputSplit.of({Part.LAUNCH: end - began}))
        segments = self._segments(began, end)
        overlays = [*self.stalls, *self.quiet, *self.drags]
        edges = {began, end, *(s for seg in segments for s in seg[:2])}
        if self.teardown is not None:
            edges.add(self.teardown)
        for span in overlays:
            edges.add(span.start)
            edges.add(span.end if span.end is not None else end)
        edges.update(q.start + q.value for q in self.quiet)  # where a phase's budget runs out
        cuts = sorted(min(end, max(began, e)) for e in edges)
        totals: dict[Part, float] = dict.fromkeys(Part, 0.0)
        by_attempt: list[dict[Part, float]] = [dict.fromkeys(Part, 0.0) for _ in self.attempts]
        index = 0
        for x, y in zip(cuts, cuts[1:], strict=False):
            if y <= x:
                continue
            middle = (x + y) / 2
            while index + 1 < len(segments) and segments[index][1] <= middle:
                index += 1
            _, _, base, attempt = segments[index]
            for part, seconds in self._classify(base, middle, end, y - x):
                totals[part] += seconds
                by_attempt[attempt][part] += seconds
        attempts = tuple(
            AttemptGoodput(
                i,
                min(end, max(began, a.began)),
                self._attempt_end(i, began, end),
                GoodputSplit.of(by_attempt[i]),
            )
            for i, a in enumerate(self.attempts)
        )
        return Goodput(began, end, GoodputSplit.of(totals), attempts)

    def current(self) -> Part:
        """The part the time goes to now."""
        if self.began is None or not self.attempts:
            return Part.LAUNCH
        end = self.now
        probe = self.split(end + 1.0)  # one second more: what it would accrue to
        before = self.split(end)
        grown = {p: probe.parts.seconds(p) - before.parts.seconds(p) for p in Part}
        return max(Part, key=lambda p: (grown[p], p == Part.STEPPING))

    def final(self, ts: float) -> Goodput:
        """The run is over at `ts`: its parts, once and for all."""
        self.now = max(self.now, ts)
        if self.began is None:
            self.began = ts
        self.ended = self.now
        return self.split(self.ended)

    # -- writing -----------------------------------------------------------------------------

    def seen(self, event: Event) -> list[GoodputReport]:
        """What an event the session emits changes: a report when the split moved."""
        if self.ended is not None or isinstance(event, GoodputReport):
            return []
        if self.began is None:
            self.began = event.ts
            self.attempts.append(_Attempt(event.ts))
        self.now = max(self.now, event.ts)
        if not self._mark(event):
            return []
        return self._report(self.now, moved=True)

    def tick(self, now: float) -> list[GoodputReport]:
        """Time passed: a report if a part's share moved by SHARE_STEP since the last."""
        if self.ended is not None or self.began is None:
            return []
        self.now = max(self.now, now)
        return self._report(self.now, moved=False)

    def _report(self, now: float, moved: bool) -> list[GoodputReport]:
        if not moved and self._last is not None and now - self._last.ts < REPORT_EVERY_S:
            return []  # a tick before a drift could be said: no split worked out
        goodput = self.split(now)
        current = self.current() if moved or self._last is None else self._last.current
        last = self._last
        if last is not None:
            same_part = current == last.current and len(goodput.attempts) == len(
                last.goodput.attempts
            )
            if same_part:
                if now - last.ts < REPORT_EVERY_S:
                    return []
                drift = max(abs(goodput.parts.share(p) - last.goodput.parts.share(p)) for p in Part)
                if drift < SHARE_STEP:
                    return []
        self._last = GoodputReport(goodput, current, ts=now)
        return [self._last]

    def _mark(self, event: Event) -> bool:
        """Keep what the event says of the run's time; whether it said anything."""
        ts = event.ts
        attempt = self.attempts[-1]
        match event:
            case RankChanged(state=RankState.RUNNING):
                changed = self._stall_over(ts)
                if attempt.running is None:
                    attempt.running = ts
                    return True
                return changed
            case RankChanged(state=RankState.FAILED | RankState.RESTARTING, restarts=restarts) if (
                restarts < self.round
            ):
                # an earlier round's word, told after a later round began: the logs read back
                # node by node at an attach tell one node's rounds before the other's
                return False
            case RankChanged(state=RankState.FAILED) if self.teardown is None:
                if attempt.broke is None and not attempt.awaiting:
                    attempt.broke = ts
                    return True
            case RankChanged(state=RankState.RESTARTING) if self.teardown is None:
                if not attempt.awaiting:
                    self._new_attempt(attempt.broke if attempt.broke is not None else ts, True)
                    return True
            case CycleReport(cycle=cycle) if cycle.index > self.round:
                self.round = cycle.index
                if attempt.awaiting:
                    attempt.awaiting = False
                else:
                    self._new_attempt(attempt.broke if attempt.broke is not None else ts, False)
                return True
            case CycleReport(cycle=cycle) if cycle.index == self.round:
                if cycle.step_reached is not None:  # the round's progress, told as it moves
                    return self._stepped(ts)
            case MetricSampled():
                return self._stepped(ts)
            case StallReport(since_s=since_s):
                if self.stalls and self.stalls[-1].end is None:
                    return False
                self.stalls.append(_Span(ts - max(0.0, since_s), said=ts))
                return True
            case PhaseChanged(phase=RunPhase.RUNNING):
                return self._stall_over(ts)
            case PhaseChanged(phase=RunPhase.TEARING_DOWN | RunPhase.DETACHING):
                return self._tearing_down(ts)
            case NodeChanged(state=NodeState.STOPPING):
                return self._tearing_down(ts)
            case NodeChanged(node=node, state=state) if state in STARTED_NODE:
                self._started.add(node)
                self._ended_nodes.discard(node)
            case NodeChanged(node=node, state=state) if state in ENDED_NODE:
                self._ended_nodes.add(node)
                if self._started and self._started <= self._ended_nodes:
                    return self._tearing_down(ts)
            case QuietPhase(began=began, ended=ended, budget_s=budget_s):
                return self._quiet(began, ended, budget_s, ts)
            case StragglerReport():
                return self._straggler(event)
        return False

    def _new_attempt(self, began: float, awaiting: bool) -> None:
        began = max(began, self.attempts[-1].began)
        self.attempts.append(_Attempt(began, awaiting=awaiting))

    def _stepped(self, ts: float) -> bool:
        attempt = self.attempts[-1]
        if attempt.awaiting:
            return False  # the old round's last word on its step: the new one has not begun
        if attempt.broke is not None and self.teardown is None and ts > attempt.broke:
            # steps again after a failure with no restart round said (a torchft group heals)
            self._new_attempt(attempt.broke, False)
            attempt = self.attempts[-1]
        if attempt.step is None:
            attempt.step = ts
            return True
        return False

    def _stall_over(self, ts: float) -> bool:
        if self.stalls and self.stalls[-1].end is None:
            self.stalls[-1].end = max(ts, self.stalls[-1].start)
            return True
        return False

    def _tearing_down(self, ts: float) -> bool:
        if self.teardown is not None:
            return False
        self.teardown = ts
        return True

    def _quiet(self, began: float, ended: float | None, budget_s: float, ts: float) -> bool:
        open_ = next((s for s in reversed(self.quiet) if s.end is None), None)
        if ended is None:
            if open_ is not None:
                return False
            self.quiet.append(_Span(began, value=budget_s, said=ts))
            return True
        if open_ is not None:
            open_.start, open_.end = min(open_.start, began), max(ended, open_.start)
        else:
            self.quiet.append(_Span(began, max(began, ended), budget_s, ts))
        return True

    def _straggler(self, event: StragglerReport) -> bool:
        slow = [s for s in event.scores if s.rank in event.ranks]
        drag = max(
            (min(1.0, max(0.0, s.late_s / (s.compute_s + s.wait_s))) for s in slow
             if s.compute_s + s.wait_s > 0),
            default=0.0,
        )  # fmt: skip
        held = self.drags[-1] if self.drags and self.drags[-1].end is None else None
        if held is not None:
            if drag > 0 and abs(held.value - drag) < 1e-9:
                return False
            held.end = max(event.ts, held.start)
        if drag > 0:
            self.drags.append(_Span(event.ts, value=drag))
        return held is not None or drag > 0

    # -- the time line -----------------------------------------------------------------------

    def _attempt_end(self, index: int, began: float, end: float) -> float:
        if index + 1 < len(self.attempts):
            return min(end, max(began, self.attempts[index + 1].began))
        return end

    def _segments(self, began: float, end: float) -> list[tuple[float, float, Part, int]]:
        """The base time line: each attempt's wait for its first step (launch or restart),
        its stepping, and, for the last attempt that broke with no restart, its end."""
        segments: list[tuple[float, float, Part, int]] = []
        last = len(self.attempts) - 1
        for i, attempt in enumerate(self.attempts):
            start = min(end, max(began, attempt.began))
            if segments:
                start = max(start, segments[-1][1])
            stop = max(start, self._attempt_end(i, began, end))
            waiting = Part.LAUNCH if i == 0 else Part.RESTART
            go = attempt.step
            if go is None and not any(a.step is not None for a in self.attempts[:i]):
                go = attempt.running  # a job that prints no steps steps from its first line
            # the last attempt broke with no restart (yet): its end runs from the failure on
            broke = attempt.broke if i == last else None
            broke = None if broke is None else min(stop, max(start, broke))
            steps_until = broke if broke is not None else stop
            if go is not None:
                go = min(steps_until, max(start, go))
                segments.append((start, go, waiting, i))
                segments.append((go, steps_until, Part.STEPPING, i))
            else:
                segments.append((start, steps_until, waiting, i))
            if broke is not None:
                segments.append((broke, stop, Part.TEARDOWN, i))
        return [s for s in segments if s[1] > s[0]] or [(began, end, Part.LAUNCH, 0)]

    def _classify(
        self, base: Part, moment: float, end: float, seconds: float
    ) -> list[tuple[Part, float]]:
        """Where `seconds` around `moment` went, on the base time line's `base` part."""
        if base == Part.TEARDOWN or (self.teardown is not None and moment >= self.teardown):
            return [(Part.TEARDOWN, seconds)]
        if self._stalled(moment, end):
            return [(Part.STALLED, seconds)]
        if base != Part.STEPPING:
            return [(base, seconds)]
        if _covers(self.quiet, moment, end):
            return [(Part.PHASES, seconds)]
        drag = next((s.value for s in self.drags if _within(s, moment, end)), 0.0)
        if drag > 0:
            return [(Part.STRAGGLER, seconds * drag), (Part.STEPPING, seconds * (1 - drag))]
        return [(Part.STEPPING, seconds)]

    def _stalled(self, moment: float, end: float) -> bool:
        """Whether a stall holds at `moment`, the phase watch's word weighed against it: a quiet
        phase said after the stall was (the silence named a checkpoint once its cue was read)
        is that phase; one said before it is a phase for its budget, then the stall."""
        quiet = [q for q in self.quiet if _within(q, moment, end)]
        for stall in self.stalls:
            if not _within(stall, moment, end):
                continue
            if any(q.said > stall.said for q in quiet):
                continue
            if any(moment < q.start + q.value for q in quiet if q.value > 0):
                continue
            return True
        return False


def _joined(before: Goodput, own: Goodput) -> Goodput:
    """A detached stretch's account `before` and the attached stretch's own `own` as one run:
    the gap between them detached. The attached console reads the node logs from their first
    line, so its own account begins with the rounds `before` knew, told again in an instant:
    its attempts up to `before`'s last fold into that one (which went on while detached),
    the later ones follow it."""
    gap = max(0.0, own.began - before.ended)
    parts = before.parts.plus(own.parts, detached=gap)
    if not before.attempts:
        return Goodput(before.began, own.ended, parts, own.attempts)
    known = len(before.attempts) - 1
    folded = [a.parts for a in own.attempts[: known + 1]]
    going = before.attempts[known]
    attempts = [
        *before.attempts[:known],
        AttemptGoodput(
            known,
            going.began,
            own.attempts[known].ended if len(own.attempts) > known + 1 else own.ended,
            going.parts.plus(*folded, detached=gap),
        ),
        *own.attempts[known + 1 :],
    ]
    return Goodput(before.began, own.ended, parts, tuple(attempts))


def _within(span: _Span, moment: float, end: float) -> bool:
    return span.start <= moment < (span.end if span.end is not None else end)


def _covers(spans: list[_Span], moment: float, end: float) -> bool:
    return any(_within(s, moment, end) for s in spans)
