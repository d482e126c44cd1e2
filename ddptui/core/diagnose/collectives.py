"""Provides the ranks' collective records read back and lined up into steps: each rank's wait.

The worker hook's sampler (`core/node/collective_sampler.py`) writes, per rank, the
collectives it enqueued. `CollectiveTimeline` gathers them across ranks per process group and
sequence number; a collective is final once every rank of its group has reported it or gone
past it. The steps come from the group with the most ranks: the sequence of (op, sizes)
repeats every step (DDP's buckets, a loss all-reduce), so its period is the number of
collectives a step, and the step ends where the gap to the next collective is widest.

For each step, each rank's wait at the step's last collective, two ways:
- **duration** (NCCL with TORCH_NCCL_ENABLE_TIMING=1): the GPU's own time in the collective
  minus the shortest of any rank's (the pure transfer): no clock is compared across ranks.
- **arrival** (gloo, or NCCL without timing): the last rank's enqueue time minus this rank's,
  on the console's clock (each node's offset subtracted, `core/monitor/clock.py`; ranks of
  one node share a clock, so within a node no offset is needed).
The step's length is the median over ranks of the time between their arrivals at two steps'
last collectives, each on its own clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from ddptui.core.monitor.clock import ZERO, ClockOffset
from ddptui.core.monitor.collective_record import in_flight

MAX_PERIOD = 32  # collectives a step, at most, that the period search tries
GAP_SAMPLES = 256  # the newest final collectives the period and phase are judged on
GAP_RANKS = 8  # the ranks whose own gaps between collectives find the step's end


@dataclass(frozen=True)
class Collective:
    """One collective as one rank enqueued it (times in ns of that rank's node clock)."""

    pg: int
    seq: int
    op: str
    sizes: str
    created_ns: int
    duration_ns: int | None = None


@dataclass(frozen=True)
class CollectiveSample:
    """One line of a rank's collectives file: what its sampler read once."""

    rank: int
    local_rank: int
    host: str
    pid: int
    wall_ns: int
    period_s: float
    cost_us: int
    cpu_us: int
    lost: int
    collectives: tuple[Collective, ...]


def parse_sample(line: str | bytes) -> CollectiveSample | None:
    """One line of the hook's file, or None if it is not one (half-written, foreign)."""
    try:
        data: Any = json.loads(line)
    except ValueError:
        return None
    return sample_from_data(data)


def sample_from_data(data: Any) -> CollectiveSample | None:
    """One line of the hook's file already decoded (as the node's stream carries it), or None
    if it is not one."""
    try:
        rows = []
        for row in data["rows"]:
            pg, seq, op, sizes, created, _started, _completed, duration_ms = row[:8]
            if not isinstance(pg, int) or not isinstance(seq, int) or not created:
                continue
            if in_flight(row):  # no times to score yet
                continue
            duration = int(duration_ms * 1e6) if duration_ms is not None else None
            rows.append(Collective(pg, seq, str(op), json.dumps(sizes), int(created), duration))
        return CollectiveSample(
            rank=int(data["rank"]),
            local_rank=int(data["local_rank"]),
            host=str(data["host"]),
            pid=int(data["pid"]),
            wall_ns=int(data["wall_ns"]),
            period_s=float(data["period_s"]),
            cost_us=int(data["cost_us"]),
            cpu_us=int(data["cpu_us"]),
            lost=int(data["lost"]),
            collectives=tuple(rows),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass(frozen=True)
class StepTimes:
    """One step as every rank lived it: its length and each rank's wait for the others at
    the collective that ended it (`waits`: rank -> s), and the time each rank's own clock
    says passed between its enqueues of the step's ends (`intervals`: rank -> s)."""

    seq: int
    period_s: float
    waits: dict[int, float]
    method: str
    intervals: dict[int, float] = field(default_factory=dict)


@dataclass
class _Final:
    seq: int
    sig: str
    arrivals: dict[int, int]  # rank -> enqueue ns, console clock
    own: dict[int, int]  # rank -> enqueue ns, the rank's own clock
    durations: dict[int, int]
    first_ns: int = 0  # the first and last arrival, once final
    last_ns: int = 0


class CollectiveTimeline:
    """Every rank's collectives, per process group and sequence number, made into steps.

    `world_size` (the rendezvous's): no collective of the main group is final before every
    rank was heard from. Without it the group is whoever has reported so far, and a rank
    whose first sample comes late misses the collectives already final."""

    def __init__(self, world_size: int | None = None, keep: int = 4096) -> None:
        self.world_size = world_size
        self.keep = keep
        self._pending: dict[tuple[int, int], _Final] = {}
        self._members: dict[int, set[int]] = {}
        self._latest: dict[int, dict[int, int]] = {}  # pg -> rank -> newest seq reported
        self._final: dict[int, list[_Final]] = {}
        self._next: dict[int, int] = {}  # pg -> the lowest seq not yet final
        self._first: dict[int, int] = {}  # pg -> the lowest seq reported before any was final
        self._dirty: set[int] = set()  # groups with reports not yet looked at by _finalize
        self._steps: dict[int, StepTimes] = {}
        self._shape: tuple[int, int, int] | None = None  # (pg, period, phase) of _steps
        self.lost = 0

    def add(self, sample: CollectiveSample, offset: ClockOffset = ZERO) -> None:
        """One rank's sample, its node's clock `offset` from the console's (what is final
        is decided when steps are asked for: once a round, not once a sample)."""
        rank, shift, pending = sample.rank, offset.offset_ns, self._pending
        self.lost += sample.lost
        newest: dict[int, int] = {}
        for c in sample.collectives:
            pg, seq = c.pg, c.seq
            entry = pending.get((pg, seq))
            if entry is None:
                if pg in self._next:
                    if seq < self._next[pg]:
                        continue  # final already without this rank: too late
                else:
                    self._first[pg] = min(self._first.get(pg, seq), seq)
                entry = pending[(pg, seq)] = _Final(seq, f"{c.op}{c.sizes}", {}, {}, {})
            entry.arrivals[rank] = c.created_ns - shift
            entry.own[rank] = c.created_ns
            if c.duration_ns is not None:
                entry.durations[rank] = c.duration_ns
            if seq > newest.get(pg, -1):
                newest[pg] = seq
        for pg, seq in newest.items():
            self._members.setdefault(pg, set()).add(rank)
            latest = self._latest.setdefault(pg, {})
            latest[rank] = max(latest.get(rank, -1), seq)
            self._dirty.add(pg)

    def main_pg(self) -> int | None:
        """The group with the most ranks (the lowest id of equals): the one steps come from."""
        if not self._members:
            return None
        return min(self._members, key=lambda pg: (-len(self._members[pg]), pg))

    def _finalize(self, pg: int) -> None:
        members = self._members[pg]
        waiting = self.world_size is not None and len(members) < self.world_size
        if waiting and pg == self.main_pg():
            return  # a rank not heard from yet: its collectives may still come
        latest = self._latest[pg]
        upto = min(latest.get(r, -1) for r in members)
        seq = self._next.get(pg, self._first[pg])
        final = self._final.setdefault(pg, [])
        while seq <= upto:
            entry = self._pending.pop((pg, seq), None)
            if entry is not None and len(entry.arrivals) == len(members):
                entry.first_ns = min(entry.arrivals.values())
                entry.last_ns = max(entry.arrivals.values())
                final.append(entry)
            seq += 1
        self._next[pg] = seq
        if len(final) > self.keep:
            del final[: len(final) - self.keep]

    def _shape_of(self, final: list[_Final]) -> tuple[int, int]:
        """(collectives a step, the seq residue of each step's last collective).

        The (op, sizes) sequence repeats with some period; a step may hold several of
        those (buckets of one size), so the step is the multiple of it at which one phase's
        gap to the next collective (each rank's own clock, a few ranks' median) is always
        wide and every other phase's narrow: the pause between one step's last all-reduce
        and the next step's first. No such multiple: the signature's period, phase 0."""
        recent = final[-GAP_SAMPLES:]
        # the newer half: a job's first collectives (DDP's broadcasts) follow no pattern
        sigs = {e.seq: e.sig for e in recent[len(recent) // 2 :]}
        base = 1
        for p in range(1, min(MAX_PERIOD, len(sigs) // 3) + 1):
            pairs = [(s, sigs[s - p]) for s in sigs if s - p in sigs]
            if pairs and sum(sigs[s] != prev for s, prev in pairs) <= len(pairs) // 10:
                base = p
                break
        probe = sorted(recent[-1].own)[:GAP_RANKS]
        gaps: list[tuple[int, float]] = []
        for a, b in zip(recent, recent[1:], strict=False):
            if b.seq == a.seq + 1:
                gaps.append((a.seq, median(b.own[r] - a.own[r] for r in probe)))
        for period in range(2 * base if base == 1 else base, MAX_PERIOD + 1, base):
            phases: dict[int, list[float]] = {}
            for seq, gap in gaps:
                phases.setdefault(seq % period, []).append(gap)
            if len(phases) < period or min(len(v) for v in phases.values()) < 3:
                break  # too few steps seen to tell
            wide = max(phases, key=lambda j: median(phases[j]))
            narrow = max(_quantile(v, 0.75) for j, v in phases.items() if j != wide)
            if _quantile(phases[wide], 0.25) > 2 * max(narrow, 0.0):
                return period, wide
        return base, 0

    def steps(self, limit: int = 64) -> list[StepTimes]:
        """The newest `limit` steps of the main group, oldest first."""
        for dirty in sorted(self._dirty):
            self._finalize(dirty)
        self._dirty.clear()
        pg = self.main_pg()
        final = self._final.get(pg, []) if pg is not None else []
        if len(final) < 2 or pg is None:
            return []
        period, phase = self._shape_of(final)
        if self._shape != (pg, period, phase):
            self._shape, self._steps = (pg, period, phase), {}
        ends = [e for e in final if e.seq % period == phase][-(limit + 1) :]
        by_seq = {e.seq: e for e in final}
        out = []
        for prev, cur in zip(ends, ends[1:], strict=False):
            if cur.seq - prev.seq != period or cur.sig != prev.sig:
                continue  # a collective missed, or not the step's pattern (the first ones)
            step = self._steps.get(cur.seq)
            if step is None:
                members = [by_seq[q] for q in range(prev.seq + 1, cur.seq + 1) if q in by_seq]
                step = self._steps[cur.seq] = _step(prev, cur, members)
            out.append(step)
        if len(self._steps) > 4 * limit:
            newest = sorted(self._steps)[-2 * limit :]
            self._steps = {s: self._steps[s] for s in newest}
        return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _step(prev: _Final, cur: _Final, members: Sequence[_Final] = ()) -> StepTimes:
    """One step's length and each rank's wait in it. Durations (NCCL) are summed over every
    collective of the step (`members`, the last one `cur`): the wait falls in whichever
    bucket's kernel the late rank is late to, not always the step's last (seen on H200s)."""
    intervals = {r: (cur.own[r] - prev.own[r]) / 1e9 for r in cur.own if r in prev.own}
    period_s = median(intervals.values()) if intervals else 0.0
    members = list(members) or [cur]
    waits: dict[int, float] = {r: 0.0 for r in cur.arrivals}
    if all(len(m.durations) == len(m.arrivals) for m in members):
        for m in members:
            fastest = min(m.durations.values())
            for r, d in m.durations.items():
                waits[r] = waits.get(r, 0.0) + (d - fastest) / 1e9
        return StepTimes(cur.seq, period_s, waits, "duration", intervals)
    # Arrivals: a rank late to the step's first bucket is as late to the rest, and the
    # others wait for it once: the step's last collective says it.
    waits = {r: (cur.last_ns - a) / 1e9 for r, a in cur.arrivals.items()}
    return StepTimes(cur.seq, period_s, waits, "arrival", intervals)


def read_samples(lines: Iterable[str | bytes]) -> list[CollectiveSample]:
    """The samples among `lines` (a rank's file, or the lines a node's stream carried)."""
    return [s for s in (parse_sample(line) for line in lines if line.strip()) if s is not None]
