"""Provides the live straggler watch: the ranks' collectives in, a scoring round every few seconds,
the straggler events out (the headless contract) with the GPU evidence of why a rank is slow.

The node's stream carries each rank's collectives file line by line (core/node/
collective_follow.py); `SpeedWatch.sample` lines them up (`collectives.CollectiveTimeline`,
each node's clock offset subtracted), `check` scores them (`straggler.StragglerScorer`) no
more often than `every_s`. The set of slow ranks changes only when a rank is slow (or no
longer slow) in two rounds running, so one noisy round neither names nor clears anyone, and a
named rank is clear only CLEAR_MARGIN above the threshold (one at the threshold would flap); the
`StragglerReport` is sent when the set changes, and a `SpeedRound` every round for the
console's speed view (headless leaves it out). The operator may pause the watch and move its
threshold while the job runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.core.diagnose.collectives import CollectiveTimeline, sample_from_data
from ddptui.core.diagnose.straggler import (
    THRESHOLD,
    Extreme,
    RankScore,
    StragglerResult,
    StragglerScorer,
    format_min_max,
    min_max_line,
    rounded_scores,
)
from ddptui.core.events import Event, GpuStat
from ddptui.core.monitor.clock import ZERO, ClockOffset
from ddptui.core.monitor.collective_record import CollectiveRecord, records_from_rows

ROUND_S = 2.0  # a scoring round this often, at most
CONFIRM_ROUNDS = 2  # rounds running a rank must be slow (or clear) to enter (or leave) the set
CLEAR_MARGIN = 0.05  # a slow rank is clear again only this far above the threshold
THRESHOLD_STEP = 0.05
IDLE_GAP = 20  # utilisation points below its peers' at which a slow rank's GPU idles
THRESHOLD_RANGE = (0.5, 0.95)


@dataclass(frozen=True)
class StragglerReport(Event):
    """The slow ranks and nodes changed: `{"event": "straggler", "ranks", "nodes", "scores",
    "method", "evidence"}` (`scores`: rank -> relative and individual, 0..1; `method`:
    "duration" (NCCL's own times) or "arrival" (enqueue times, clocks corrected)). An empty
    `ranks` after a non-empty one: the stragglers recovered."""

    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    scores: tuple[RankScore, ...]
    method: str
    evidence: tuple[str, ...]
    threshold: float = THRESHOLD

    kind = "straggler"

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "ts": self.ts,
            "ranks": list(self.ranks),
            "nodes": list(self.nodes),
            "scores": {str(s.rank): rounded_scores(s) for s in self.scores},
            "method": self.method,
            "evidence": list(self.evidence),
            "threshold": round(self.threshold, 2),
        }


@dataclass(frozen=True)
class SpeedRound(Event):
    """One scoring round for the console: every rank's scores, compute and wait, the slow ones
    (as confirmed), the min/max line and the watch's state (the speed view draws this)."""

    scores: tuple[RankScore, ...]
    slow: tuple[int, ...]
    slow_nodes: tuple[str, ...]
    extremes: tuple[Extreme, ...]
    threshold: float
    paused: bool = False
    steps: int = 0

    kind = "speed"
    recorded = False  # the speed view's, every round: the straggler events say what changed

    @property
    def line(self) -> str:
        """Megatron's line: `step 0.52s (r1)..0.53s (r0) | wait ... | power ...`."""
        return format_min_max(self.extremes)


class SpeedWatch:
    """The run's straggler detection: collectives lined up, scored in rounds, evidence added."""

    def __init__(
        self,
        world_size: int | None,
        threshold: float = THRESHOLD,
        every_s: float = ROUND_S,
    ) -> None:
        self.timeline = CollectiveTimeline(world_size)
        self.scorer = StragglerScorer(threshold)
        self.every_s = every_s
        self.offsets: dict[str, ClockOffset] = {}
        self.nodes: dict[int, str] = {}  # rank -> node, as its samples came
        self.paused = False
        self.last: StragglerReport | None = None  # the last one sent
        self.scored = False  # a round has scored the ranks: the watch judges who is slow
        self._next = 0.0
        self._streak: dict[int, int] = {}  # rank -> rounds running its verdict differed
        self._slow: tuple[int, ...] = ()

    @property
    def threshold(self) -> float:
        return self.scorer.threshold

    def set_threshold(self, value: float) -> float:
        """The operator's new threshold (kept within THRESHOLD_RANGE); the next round uses it."""
        low, high = THRESHOLD_RANGE
        self.scorer.threshold = round(min(high, max(low, value)), 2)
        self._next = 0.0
        return self.scorer.threshold

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._next = 0.0

    def set_offset(self, node: str, offset: ClockOffset) -> None:
        """The node's clock offset, for the samples that come from now on."""
        self.offsets[node] = offset

    def sample(self, node: str, data: Any) -> list[CollectiveRecord]:
        """One line of a rank's collectives file, decoded; its records for the audit."""
        sample = sample_from_data(data)
        if sample is None:
            return []
        self.nodes[sample.rank] = node
        self.timeline.add(sample, self.offsets.get(node, ZERO))
        rows = data.get("rows") if isinstance(data, Mapping) else None
        return records_from_rows(sample.rank, rows or ())

    def check(self, now: float, gpus: Mapping[str, Sequence[GpuStat]] | None = None) -> list[Event]:
        """A scoring round if one is due: the SpeedRound, and a StragglerReport when the set
        of slow ranks changed (`gpus`: each node's GPUs as last sampled, for the evidence)."""
        if now < self._next:
            return []
        self._next = now + self.every_s
        if self.paused:
            return [SpeedRound((), (), (), (), self.threshold, True, ts=now)]
        result = self.scorer.score(self.timeline.steps(self.scorer.window_steps), self.nodes)
        if not result.method:
            return []
        self.scored = True
        by_rank = {r: g for stats in (gpus or {}).values() for g in stats for r in g.ranks}
        slow = self._confirm(result)
        nodes = _slow_nodes(result.scores, slow)
        extremes = min_max_line(result, _gpu_fields(by_rank, result.scores))
        events: list[Event] = [
            SpeedRound(result.scores, slow, nodes, extremes, self.threshold, False, result.steps)
        ]
        if slow != self._slow:
            self._slow = slow
            evidence = _evidence(result, slow, nodes, by_rank)
            report = StragglerReport(
                slow, nodes, result.scores, result.method, evidence, self.threshold, ts=now
            )
            if slow or self.last is not None:
                self.last = report
                events.append(report)
        return events

    def _confirm(self, result: StragglerResult) -> tuple[int, ...]:
        """The slow set, each change of a rank's verdict held for CONFIRM_ROUNDS rounds."""
        now_slow = set(result.ranks)
        kept = set(self._slow)
        clear_at = self.threshold + CLEAR_MARGIN
        for score in result.scores:
            slow = score.rank in now_slow or (score.rank in kept and score.relative < clear_at)
            changed = slow != (score.rank in kept)
            self._streak[score.rank] = self._streak.get(score.rank, 0) + 1 if changed else 0
            if self._streak[score.rank] >= CONFIRM_ROUNDS:
                kept ^= {score.rank}
                self._streak[score.rank] = 0
        return tuple(sorted(kept & {s.rank for s in result.scores}))


def _slow_nodes(scores: Sequence[RankScore], slow: Sequence[int]) -> tuple[str, ...]:
    by_node: dict[str, list[int]] = {}
    for s in scores:
        by_node.setdefault(s.node, []).append(s.rank)
    chosen = set(slow)
    return tuple(n for n, ranks in sorted(by_node.items()) if n and set(ranks) <= chosen)


def _gpu_fields(
    by_rank: Mapping[int, GpuStat], scores: Sequence[RankScore]
) -> dict[str, dict[int, float]]:
    """The min/max line's GPU fields for the ranks scored (rank -> value where known)."""
    fields: dict[str, dict[int, float]] = {"util": {}, "power": {}, "temp": {}, "sm_clock": {}}
    for s in scores:
        gpu = by_rank.get(s.rank)
        if gpu is None:
            continue
        for name, value in (
            ("util", gpu.util),
            ("power", gpu.power_w),
            ("temp", gpu.temp_c),
            ("sm_clock", gpu.sm_mhz),
        ):
            if value is not None:
                fields[name][s.rank] = float(value)
    return fields


def _evidence(
    result: StragglerResult,
    slow: Sequence[int],
    nodes: Sequence[str],
    by_rank: Mapping[int, GpuStat],
) -> tuple[str, ...]:
    """The scorer's lines for the confirmed set, each slow rank's with what its GPU says:
    `rank 5 (node07) at 0.62: its peers wait 0.40 s per step for it (...); GPU 5 power cap,
    SM clock 1,410 MHz vs 1,980 on the others`."""
    scores = {s.rank: s for s in result.scores}
    lines = []
    for node in nodes:
        mine = [scores[r] for r in slow if scores[r].node == node]
        low, high = min(s.relative for s in mine), max(s.relative for s in mine)
        late = sorted(s.late_s for s in mine)[len(mine) // 2]
        lines.append(
            f"node {node}: all {len(mine)} ranks slow ({low:.2f}-{high:.2f}), "
            f"its peers wait {late:.2f} s per step for it"
        )
    others = [by_rank[r] for r in scores if r not in slow and r in by_rank]
    for rank in sorted(slow, key=lambda r: scores[r].relative):
        s = scores[rank]
        line = f"rank {s.rank} ({s.node}) at {s.relative:.2f}: its peers wait {s.late_s:.2f} s"
        line += f" per step for it ({s.compute_s:.2f} s of compute a step)"
        if s.individual < 0.95:
            line += f", {s.individual:.2f} of its own best"
        gpu = by_rank.get(rank)
        if gpu is not None:
            line += "; " + gpu_evidence(gpu, others)
        lines.append(line)
    return tuple(lines)


def gpu_evidence(gpu: GpuStat, others: Sequence[GpuStat]) -> str:
    """What the slow rank's GPU shows against its peers': its slow-down reasons, its SM clock,
    utilisation and power where they stand apart (`GPU 5 power cap, SM clock 1,410 MHz vs
    1,980 on the others`)."""
    parts = [f"GPU {gpu.index}" + (f" {', '.join(gpu.throttle)}" if gpu.throttle else "")]

    def versus(label: str, mine: float | None, theirs: list[float], unit: str) -> None:
        if mine is None:
            return
        if not theirs:
            parts.append(f"{label} {mine:,.0f}{unit}")
            return
        typical = sorted(theirs)[len(theirs) // 2]
        if abs(mine - typical) >= 0.1 * max(abs(typical), 1.0):
            parts.append(f"{label} {mine:,.0f}{unit} vs {typical:,.0f} on the others")

    versus("SM clock", gpu.sm_mhz, [o.sm_mhz for o in others if o.sm_mhz is not None], " MHz")
    versus("utilisation", gpu.util, [o.util for o in others if o.util is not None], "%")
    versus("power", gpu.power_w, [o.power_w for o in others if o.power_w is not None], " W")
    versus("temperature", gpu.temp_c, [o.temp_c for o in others if o.temp_c is not None], " C")
    said = ", ".join(parts) if len(parts) > 1 or gpu.throttle else f"GPU {gpu.index} as its peers"
    return said + _where(gpu, others)


def _where(gpu: GpuStat, others: Sequence[GpuStat]) -> str:
    """Where the slow rank's time goes, as far as its GPU tells: a GPU busy less than its
    peers' (which wait in the collective, kernels spinning) means the rank's time goes off the
    GPU, to data loading or CPU work; a GPU as busy but held down runs its kernels slower."""
    utils = sorted(o.util for o in others if o.util is not None)
    if gpu.util is None or not utils:
        return ""
    typical = utils[len(utils) // 2]
    if gpu.util <= typical - IDLE_GAP:
        return ": its time goes off the GPU (data loading or CPU work)"
    if gpu.throttle:
        return ": its kernels run slower"
    return ""


@dataclass(frozen=True)
class SpeedRow:
    """One line of the speed view: alike ranks folded (`r0-3,6`), their compute and wait a
    step (the group's medians), the lowest relative score among them, and whether they are
    the watch's named stragglers."""

    label: str
    ranks: tuple[int, ...]
    compute_s: float
    wait_s: float
    relative: float
    slow: bool


def speed_rows(round_: SpeedRound, cells: int = 20, most: int = 12) -> list[SpeedRow]:
    """The speed view's lines: each rank's compute vs wait as a bar of `cells` cells; ranks
    whose bars are the same and who are alike slow or not fold into one line, so 1,024
    ranks read as a few. Slow ones first, then by rank; at most `most` lines (the last one
    holds whatever is left, folded)."""
    scores = sorted(round_.scores, key=lambda s: s.rank)
    if not scores:
        return []
    longest = max(s.compute_s + s.wait_s for s in scores) or 1.0
    slow = set(round_.slow)
    groups: dict[tuple[int, int, bool], list[RankScore]] = {}
    for s in scores:
        key = (
            round(s.compute_s / longest * cells),
            round(s.wait_s / longest * cells),
            s.rank in slow,
        )
        groups.setdefault(key, []).append(s)
    rows = [_row(members, key[2]) for key, members in groups.items()]
    rows.sort(key=lambda r: (not r.slow, r.ranks[0]))
    if len(rows) > most:
        rest = [s for s in scores if s.rank in {r for row in rows[most - 1 :] for r in row.ranks}]
        rows = [*rows[: most - 1], _row(rest, False)]
    return rows


def _row(members: Sequence[RankScore], slow: bool) -> SpeedRow:
    ranks = tuple(sorted(s.rank for s in members))
    compute = sorted(s.compute_s for s in members)[len(members) // 2]
    wait = sorted(s.wait_s for s in members)[len(members) // 2]
    relative = min(s.relative for s in members)
    return SpeedRow(rank_ranges(ranks), ranks, compute, wait, relative, slow)


def rank_ranges(ranks: Sequence[int]) -> str:
    """`r0-3,6,9-10`: sorted ranks with runs folded."""
    parts: list[str] = []
    start = prev = None
    for rank in sorted(ranks):
        if prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = rank
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return "r" + ",".join(parts)
