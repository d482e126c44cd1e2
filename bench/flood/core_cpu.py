"""Core ingest in CPU time: JobWatch.feed over 16 nodes' rank-prefixed lines, best of N.

Wall-clock rates move several-fold on a shared, loaded machine; the CPU time of one process
doing pure Python work moves a few percent. This is the figure to compare two trees by
(run it in each, alternating): `python -m bench.flood.core_cpu --reps 5`.
"""

from __future__ import annotations

import argparse
import time

from testbed.standins.flood_node import flood_lines

NODES = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000, help="lines per node")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    try:
        from ddptui.core.diagnose.job_watch import JobWatch
    except ImportError:  # the flat core of earlier trees, for comparisons across them
        from ddptui.core.monitor.monitor import Monitor as JobWatch  # type: ignore[no-redef]

    nodes = [f"local{i}" for i in range(NODES)]
    data = {n: flood_lines(f"[ddptui:{i}:0]:", 0, args.lines) for i, n in enumerate(nodes)}
    longest = max(map(len, data.values()))
    chunks = [(n, data[n][o : o + (1 << 16)]) for o in range(0, longest, 1 << 16) for n in nodes]
    best = float("inf")
    for _ in range(args.reps):
        monitor = JobWatch(nodes, 1)
        start = time.process_time()
        for node, chunk in chunks:
            monitor.feed(node, chunk)
        best = min(best, time.process_time() - start)
    print(
        f"Monitor.feed: {args.lines * NODES / best:,.0f} lines/s of CPU time (best of {args.reps})"
    )


if __name__ == "__main__":
    main()
