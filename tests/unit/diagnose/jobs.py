"""Provides simulated DDP jobs as the worker hook would record them, for the scorer's tests."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from ddptui.core.diagnose.collectives import Collective, CollectiveSample

NS = 1_000_000_000


def simulate(
    ranks: int = 4,
    per_node: int = 2,
    steps: int = 60,
    step_s: float = 0.2,
    extra: Callable[[int, int], float] = lambda rank, step: 0.0,
    buckets: int = 1,
    jitter_s: float = 0.0,
    skew_s: Mapping[int, float] | None = None,
    durations: bool = False,
    same_sizes: bool = False,
    seed: int = 0,
) -> list[CollectiveSample]:
    """Every rank's samples of a DDP job: each step a rank computes `step_s` plus
    `extra(rank, step)` (plus uniform jitter), then enqueues `buckets` all-reduces 5 ms apart
    (each of its own size, or all of one with `same_sizes`);
    a bucket completes 2 ms after its last rank enqueued it. Node `n`'s clock reads
    `skew_s[n]` seconds ahead. One sample per rank per 5 steps."""
    rng = random.Random(seed)
    skew = skew_s or {}
    transfer, spacing = 2_000_000, 5_000_000
    release, seq = 10 * NS, 0
    rows: dict[int, list[Collective]] = {r: [] for r in range(ranks)}
    samples = []
    for step in range(steps):
        starts = {
            r: release + int((step_s + extra(r, step) + rng.uniform(0, jitter_s)) * NS)
            for r in range(ranks)
        }
        for b in range(buckets):
            seq += 1
            arrive = {r: starts[r] + b * spacing for r in range(ranks)}
            done = max(arrive.values()) + transfer
            for r in range(ranks):
                node_ns = arrive[r] + int(skew.get(r // per_node, 0.0) * NS)
                took = done - arrive[r] if durations else None
                sizes = "[[4]]" if same_sizes else f"[[{b}]]"
                rows[r].append(Collective(0, seq, "nccl:all_reduce", sizes, node_ns, took))
            release = done
        if step % 5 == 4 or step == steps - 1:
            for r in range(ranks):
                samples.append(_sample(r, per_node, rows[r]))
                rows[r] = []
    return samples


def _sample(rank: int, per_node: int, rows: list[Collective]) -> CollectiveSample:
    return CollectiveSample(
        rank=rank,
        local_rank=rank % per_node,
        host=f"node{rank // per_node}",
        pid=1000 + rank,
        wall_ns=rows[-1].created_ns,
        period_s=1.0,
        cost_us=300,
        cpu_us=250,
        lost=0,
        collectives=tuple(rows),
    )


def nodes_of(ranks: int = 4, per_node: int = 2) -> dict[int, str]:
    return {r: f"node{r // per_node}" for r in range(ranks)}
