"""Slurm with a busy queue: what the console's questions about its job cost when the
controller holds many other jobs, and what that does to a launch and a teardown.

A cluster's queue holds thousands of jobs. The console asks about its own job after the
grant, while it waits for a pending one, every second or two while a run is quiet (may the
job still end a node's log?), and until the job is gone at teardown. On the project's Slurm
testbed (testbed/: slurmctld, one slurmd per host namespace, real Slurm 22.05) the queue
gets K held jobs first (`sbatch --hold`: pending, never run), then, interleaved:

- one question, each way: `squeue --json` (22.05 ignores -j and answers with every job the
  controller knows) and `scontrol -o show job ID` (that job's record alone), timed as a
  fresh process from the head node with its output's size;
- with `--baseline TREE`: `ddptui run --headless --backend slurm` (slurm_scale.py's run: the
  fleet's stand-in on every node, launch to every rank running, teardown to the process's
  exit) for this tree and the baseline, and `srun` of the same stand-in by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from bench.common.report import Table, arg_parser, fmt_s
from bench.common.stats import interleaved, median
from bench.slurm.slurm_scale import (
    BASE,
    BY_HAND,
    OURS,
    Sample,
    ddptui_run,
    slurm_testbed,
    srun_run,
    tree_report,
)
from testbed import SlurmCluster

SQUEUE_JSON = "squeue --json"
SCONTROL_JOB = "scontrol -o show job ID"


def queue_up(cluster: SlurmCluster, count: int, tmp: Path) -> list[str]:
    """`count` held jobs of one node each, submitted in one shell: their ids."""
    script = f"for i in $(seq {count}); do sbatch --parsable --hold -o /dev/null --wrap true; done"
    out = cluster.run(["sh", "-c", script], cwd=tmp, timeout=600).stdout
    return [line.split(";")[0] for line in out.split()]


def ask(cluster: SlurmCluster, argv: list[str]) -> Sample:
    t0 = time.monotonic()
    done = cluster.run(argv, check=False, timeout=120)
    took = time.monotonic() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]}: {done.stderr.strip()}")
    return {"seconds": took, "bytes": len(done.stdout.encode())}


def _median(samples: list[Sample], key: str) -> float:
    return median([s[key] for s in samples])


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--queued", type=int, default=2000, help="held jobs in the queue")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="a tree of ddptui run as `ddptui (base)`")
    args = parser.parse_args()
    n = 2 if args.quick else args.nodes
    queued = 50 if args.quick else args.queued
    reps = 1 if args.quick else args.reps
    report = tree_report(
        "slurm_busy_queue", f"Slurm with {queued} jobs queued", __doc__, args.baseline
    )
    with slurm_testbed(n, "busy-queue") as (cluster, tmp, built):
        report.para(built)
        t0 = time.monotonic()
        held = queue_up(cluster, queued, tmp)
        report.para(f"{len(held)} held jobs queued in {time.monotonic() - t0:.1f} s.")
        probe = held[len(held) // 2]
        questions: dict[str, Callable[[int], Sample]] = {
            SQUEUE_JSON: lambda _: ask(cluster, ["squeue", "--json"]),
            SCONTROL_JOB: lambda _: ask(cluster, ["scontrol", "-o", "show", "job", probe]),
        }
        asked = interleaved(max(reps, 5), questions)
        runs: dict[str, list[Sample]] = {}
        if args.baseline is not None:
            base = args.baseline
            tools: dict[str, Callable[[int], Sample]] = {
                OURS: lambda _: ddptui_run(cluster, n, tmp, keep=held),
                BY_HAND: lambda _: srun_run(cluster, n, tmp, keep=held),
                BASE: lambda _: ddptui_run(cluster, n, tmp, tree=base, keep=held),
            }
            runs = interleaved(reps, tools)
    report.section(f"One question about one job, {queued} others queued (N={max(reps, 5)})")
    table = Table(["question", "median", "output", "each run"])
    for name, samples in asked.items():
        table.add(
            name,
            fmt_s(_median(samples, "seconds")),
            f"{_median(samples, 'bytes') / 1024:.0f} KiB",
            " ".join(f"{s['seconds']:.3f}" for s in samples),
        )
    report.table(table)
    if runs:
        report.section(f"{n} nodes, {queued} jobs queued, N={reps} interleaved")
        whole = Table(["launch", "to all running (median)", "teardown (median)", "dirty nodes"])
        for tool, samples in runs.items():
            whole.add(
                tool,
                fmt_s(_median(samples, "launch")),
                fmt_s(_median(samples, "teardown")),
                " ".join(str(s["dirty nodes"]) for s in samples),
            )
        report.table(whole)
        phases = Table(["phase", OURS, BASE])
        for phase in ("to salloc granted", "granted to step started", "proven to released"):
            phases.add(phase, *[fmt_s(_median(runs[t], phase)) for t in (OURS, BASE)])
        report.table(phases)
    report.write()


if __name__ == "__main__":
    main()
