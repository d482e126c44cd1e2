"""Provides the straggler scores: each rank 0..1 against the best rank and against its own best.

Under DDP every rank's step lasts as long as the slowest one's (the gradient all-reduce is a
barrier), so step rates cannot tell the straggler. What differs is the wait: the others wait
in the collective for the rank that arrives last. A rank's compute per step is the step's
length minus its wait (`collectives.StepTimes`), and as in NVIDIA's resiliency extension
(NVRx) its **relative** score is the best rank's compute over its own (1: as fast as the
fastest) and its **individual** score its own best compute (of a whole window) over its
compute now (1: as fast as it ever was). Both are medians over a sliding window of steps, so
a burst does not flag a rank and a rank that recovers is cleared once the window has moved
past its slow steps. A rank is slow below the threshold when it also costs its peers at least
`min_late_s` a step (noise on a balanced job stays below both); a node is slow when every one
of its ranks is.

The threshold is 0.8 by default, not NVRx's 0.75: NVRx times only the sections the user
wraps (the forward and backward), while a rank's compute here is everything between two of
its step's last collectives, the step's other collectives and their transfers included. That
shared part is the same for every rank and dilutes the ratio: a rank whose own work takes 30%
longer scores 1/1.3 = 0.77 with nothing shared and more with it (0.79 when a tenth of the
step is shared), just above 0.75. At 0.8 it is named, and a balanced job's medians (0.9 and
above, even on a loaded machine) stay clear of it. The operator may change it while the job runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from ddptui.core.diagnose.collectives import StepTimes

THRESHOLD = 0.8
RUN_AHEAD = 0.9  # a rank whose enqueues come this much faster than the slowest's runs ahead
UNITS = {"step": "s", "compute": "s", "wait": "s", "util": "%", "power": "W", "temp": "C"}
UNITS["sm_clock"] = "MHz"


@dataclass(frozen=True)
class RankScore:
    """One rank's scores and the medians they come from (seconds per step)."""

    rank: int
    node: str
    relative: float
    individual: float
    compute_s: float
    wait_s: float
    late_s: float  # its compute beyond the best rank's: what its peers wait for it a step
    slow: bool


@dataclass(frozen=True)
class StragglerResult:
    """The judgement of one scoring round: the slow ranks and nodes, every rank's scores."""

    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    scores: tuple[RankScore, ...]
    method: str  # "duration", "arrival", or "" while too few steps are known
    evidence: tuple[str, ...]
    steps: int
    threshold: float

    def score_of(self, rank: int) -> RankScore | None:
        return next((s for s in self.scores if s.rank == rank), None)

    def to_dict(self) -> dict[str, Any]:
        """The headless event's fields (`{"event": "straggler", ...}`)."""
        return {
            "ranks": list(self.ranks),
            "nodes": list(self.nodes),
            "scores": {str(s.rank): rounded_scores(s) for s in self.scores},
            "method": self.method,
            "evidence": list(self.evidence),
        }


class StragglerScorer:
    """Scores rounds of steps; keeps each rank's best compute per step between rounds.

    `threshold` may be changed between rounds (the operator's key)."""

    def __init__(
        self,
        threshold: float = THRESHOLD,
        window_steps: int = 30,
        min_steps: int = 8,
        min_late_s: float = 0.005,
    ) -> None:
        self.threshold = threshold
        self.window_steps = window_steps
        self.min_steps = min_steps
        self.min_late_s = min_late_s
        self._best: dict[int, float] = {}

    def score(self, steps: Sequence[StepTimes], nodes: Mapping[int, str]) -> StragglerResult:
        """Scores over the newest `window_steps` of `steps`; `nodes`: rank -> node name."""
        window = list(steps)[-self.window_steps :]
        if len(window) < self.min_steps:
            return StragglerResult((), (), (), "", (), len(window), self.threshold)
        ranks = sorted(set().union(*(step.waits for step in window)))
        waits = {r: [step.waits.get(r) for step in window] for r in ranks}
        compute, wait_of = {}, {}
        own = _own_intervals(window, ranks)
        longest = max(own.values(), default=0.0)
        for rank, column in waits.items():
            periods = [step.intervals.get(rank, step.period_s) for step in window]
            lengths = [p - w for p, w in zip(periods, column, strict=True) if w is not None]
            compute[rank] = max(1e-6, median(lengths))
            wait_of[rank] = median(w for w in column if w is not None)
            if rank in own and own[rank] < RUN_AHEAD * longest:
                # Its CPU runs ahead of its GPU (no sync each step): its collectives wait on
                # the GPU while its CPU works on, so a GPU wait overlaps its own work; the
                # time between its own enqueues is that work.
                compute[rank] = max(1e-6, own[rank])
        best_now = min(compute.values())
        full = len(window) >= self.window_steps  # a rank's best is of whole windows only
        scores = []
        for rank in ranks:
            mine = compute[rank]
            best = self._best.get(rank, mine)
            if mine < best and full:
                best = mine
            if full:
                self._best[rank] = best
            late, relative = mine - best_now, best_now / mine
            slow = relative < self.threshold and late >= self.min_late_s
            node = nodes.get(rank, "")
            scores.append(
                RankScore(rank, node, relative, best / mine, mine, wait_of[rank], late, slow)
            )
        methods = [s.method for s in window]
        method = max(set(methods), key=methods.count)
        return self._result(tuple(scores), method, len(window))

    def _result(self, scores: tuple[RankScore, ...], method: str, steps: int) -> StragglerResult:
        by_node: dict[str, list[RankScore]] = {}
        for s in scores:
            by_node.setdefault(s.node, []).append(s)
        nodes = tuple(n for n, ss in sorted(by_node.items()) if n and all(s.slow for s in ss))
        slow = sorted((s for s in scores if s.slow), key=lambda s: s.relative)
        evidence = [_node_line(n, by_node[n]) for n in nodes]
        evidence += [_rank_line(s) for s in slow]
        evidence += [
            f"rank {s.rank} ({s.node}) at {s.individual:.2f} of its own best: "
            f"{s.compute_s:.2f} s of compute a step, {s.compute_s * s.individual:.2f} s at best"
            for s in scores
            if not s.slow and s.individual < self.threshold
        ]
        ranks = tuple(s.rank for s in slow)
        return StragglerResult(ranks, nodes, scores, method, tuple(evidence), steps, self.threshold)


def _own_intervals(window: Sequence[StepTimes], ranks: Sequence[int]) -> dict[int, float]:
    """Each rank's median time between its own enqueues of a step's end (its clock only)."""
    own = {}
    for rank in ranks:
        column = [step.intervals[rank] for step in window if rank in step.intervals]
        if len(column) * 2 >= len(window):
            own[rank] = median(column)
    return own


def rounded_scores(s: RankScore) -> dict[str, float]:
    return {"relative": round(s.relative, 3), "individual": round(s.individual, 3)}


def _rank_line(s: RankScore) -> str:
    line = f"rank {s.rank} ({s.node}) at {s.relative:.2f}: its peers wait {s.late_s:.2f} s"
    line += f" per step for it ({s.compute_s:.2f} s of compute a step)"
    if s.individual < 0.95:
        line += f", {s.individual:.2f} of its own best"
    return line


def _node_line(node: str, scores: list[RankScore]) -> str:
    low, high = min(s.relative for s in scores), max(s.relative for s in scores)
    late = median(s.late_s for s in scores)
    return (
        f"node {node}: all {len(scores)} ranks slow ({low:.2f}-{high:.2f}), "
        f"its peers wait {late:.2f} s per step for it"
    )


@dataclass(frozen=True)
class Extreme:
    """One field's lowest and highest value over the ranks, with the rank holding each."""

    field: str
    low: float
    low_rank: int
    high: float
    high_rank: int

    @property
    def text(self) -> str:
        unit = UNITS.get(self.field, "")
        fmt = "{:.2f}" if unit == "s" else "{:.0f}"
        low, high = fmt.format(self.low), fmt.format(self.high)
        return f"{self.field} {low}{unit} (r{self.low_rank})..{high}{unit} (r{self.high_rank})"


def extremes(fields: Mapping[str, Mapping[int, float]]) -> tuple[Extreme, ...]:
    """Megatron's min/max line: for each field (rank -> value), min and max with their rank
    (the lower rank of equals). Fields with no value are left out."""
    out = []
    for name, values in fields.items():
        if not values:
            continue
        low = min(values, key=lambda r: (values[r], r))
        high = min(values, key=lambda r: (-values[r], r))
        out.append(Extreme(name, values[low], low, values[high], high))
    return tuple(out)


def min_max_line(
    result: StragglerResult, gpu: Mapping[str, Mapping[int, float]] | None = None
) -> tuple[Extreme, ...]:
    """The extremes of step time, compute and wait from `result`, then of each GPU field
    given (`util`, `power`, `temp`, `sm_clock`: rank -> value)."""
    fields: dict[str, Mapping[int, float]] = {
        "step": {s.rank: s.compute_s + s.wait_s for s in result.scores},
        "compute": {s.rank: s.compute_s for s in result.scores},
        "wait": {s.rank: s.wait_s for s in result.scores},
    }
    fields.update(gpu or {})
    return extremes(fields)


def format_min_max(line: Sequence[Extreme]) -> str:
    """`step 0.52s (r1)..0.53s (r0) | wait 0.00s (r1)..0.40s (r3) | ...`"""
    return " | ".join(e.text for e in line)
