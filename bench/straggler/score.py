"""Straggler scoring: the console's CPU time per round (ingest one second of records, score).

A simulated DDP job at 64, 256 and 1,024 ranks (8 a node, 10 steps/s, 4 all-reduce buckets a
step, one rank 40% slower): each round, every rank's sampler line of the last second goes
through `CollectiveTimeline.add` (with its node's clock offset), then `steps` and
`StragglerScorer.score` judge the newest 30 steps, as the console will once a second. The
table gives the median and worst CPU time (process time) of each part over the rounds, and
checks that the slow rank was named.

    python3 -m bench.straggler.score [--rounds N]
"""

from __future__ import annotations

import argparse
import random
import time
from statistics import median

from ddptui.core.diagnose.collectives import Collective, CollectiveSample, CollectiveTimeline
from ddptui.core.diagnose.straggler import StragglerScorer, format_min_max, min_max_line
from ddptui.core.monitor.clock import ClockOffset

NS = 1_000_000_000
PER_NODE, STEPS_A_S, BUCKETS, STEP_S = 8, 10, 4, 0.08


class Job:
    """Makes each second's sampler lines of a job with one slow rank (rank 5)."""

    def __init__(self, ranks: int) -> None:
        self.ranks, self.seq, self.release = ranks, 0, 10 * NS
        self.rng = random.Random(ranks)
        self.skew = {n: self.rng.randint(-5 * NS, 5 * NS) for n in range(ranks // PER_NODE)}

    def second(self) -> list[CollectiveSample]:
        rows: list[list[Collective]] = [[] for _ in range(self.ranks)]
        for _ in range(STEPS_A_S):
            slow = {5: 0.4 * STEP_S}
            starts = [
                self.release + int((STEP_S + slow.get(r, 0.0) + self.rng.uniform(0, 0.005)) * NS)
                for r in range(self.ranks)
            ]
            for b in range(BUCKETS):
                self.seq += 1
                arrive = [s + b * 2_000_000 for s in starts]
                for r in range(self.ranks):
                    created = arrive[r] + self.skew[r // PER_NODE]
                    rows[r].append(Collective(0, self.seq, "nccl:all_reduce", f"[[{b}]]", created))
                self.release = max(arrive) + 1_000_000
        return [
            CollectiveSample(r, r % PER_NODE, f"node{r // PER_NODE}", r, 0, 1.0, 0, 0, 0, tuple(x))
            for r, x in enumerate(rows)
        ]


def run(ranks: int, rounds: int) -> dict[str, float | str]:
    job = Job(ranks)
    offsets = {f"node{n}": ClockOffset(s, 0, 1) for n, s in job.skew.items()}
    nodes = {r: f"node{r // PER_NODE}" for r in range(ranks)}
    timeline, scorer = CollectiveTimeline(world_size=ranks), StragglerScorer()
    ingest, score, named, line = [], [], "", ""
    for index in range(rounds + 4):  # 4 seconds first: the window fills
        samples = job.second()
        t0 = time.process_time()
        for sample in samples:
            timeline.add(sample, offsets[sample.host])
        t1 = time.process_time()
        result = scorer.score(timeline.steps(limit=scorer.window_steps), nodes)
        t2 = time.process_time()
        if index >= 4:
            ingest.append(t1 - t0)
            score.append(t2 - t1)
            named = ",".join(map(str, result.ranks))
            line = format_min_max(min_max_line(result))
    return {
        "ranks": ranks,
        "rows/s": ranks * STEPS_A_S * BUCKETS,
        "ingest ms": median(ingest) * 1e3,
        "ingest max": max(ingest) * 1e3,
        "score ms": median(score) * 1e3,
        "score max": max(score) * 1e3,
        "named": named,
        "line": line,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    results = [run(n, args.rounds) for n in (64, 256, 1024)]
    head = "| ranks | rows/s | ingest ms (median / max) | score ms (median / max) | named |"
    print(head)
    print("|---:|---:|---:|---:|---|")
    for r in results:
        print(
            f"| {r['ranks']} | {r['rows/s']} | {r['ingest ms']:.1f} / {r['ingest max']:.1f} "
            f"| {r['score ms']:.1f} / {r['score max']:.1f} | {r['named']} |"
        )
    print()
    print(f"min/max line at {results[-1]['ranks']} ranks: {results[-1]['line']}")


if __name__ == "__main__":
    main()
