"""Slurm at scale: many slurmd nodes in namespaces; ddptui's salloc + one step vs srun by hand.

The testbed is the project's own (testbed/): slurmctld in the head namespace, one slurmd
per host namespace (real Slurm 22.05, munge). On every node the fleet's stand-in for torchrun
(testbed/standins/fleet_standin.sh) reports its rank, then holds until killed.

- ddptui: `ddptui run --headless --backend slurm --nodes N --nproc-per-node 1 --launcher
  'bash fleet_standin.sh'` (salloc --no-shell, then one srun step with a task per node, its
  stream split per node; each task, a shell program, finds its interface and the first
  checks the rendezvous port); launched = every rank shown running; teardown = SIGTERM to
  the process's exit (Slurm's SIGTERM to every process of the step; each task proves its
  node once its command has ended, a reap step only for a node without that proof; the
  allocation released). With `--baseline TREE`, that tree of ddptui runs too, as
  `ddptui (base)`, interleaved.
- by hand: `srun -N N --ntasks-per-node=1 bash fleet_standin.sh` (one step, N tasks, the
  same stand-in), launched = every node's ready line; teardown = SIGTERM to srun (it
  kills the tasks and ends the job) until srun exits; nothing is proven.
- floor: what any console pays that validates the job in Python before it asks Slurm, then
  uses salloc and one step: `python -c 'import ddptui.cli.jobargs'` (the job's models,
  pydantic), `salloc --no-shell`, a plain `srun --jobid` of the same stand-in; teardown =
  SIGTERM to that srun until it exits, then scancel until squeue no longer lists the job.
  ddptui's cost over it is its own; the floor's over srun by hand is the design's.
All are then checked from outside: no process other than the daemons in any node's
namespace, and squeue empty. Interleaved; the table gives totals and seconds per node.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common.hosts import TimedStream, all_ranks_running, slurm_strays
from bench.common.report import Report, Table, arg_parser, command_line, fmt_s, load_average
from bench.common.stats import interleaved, median
from bench.common.trees import ROOT, compile_bytecode, describe_tree
from testbed import SlurmCluster, Testbed, cleanup_stale
from testbed.slurm_ddptui import cluster_env, ddptui_argv
from testbed.standins import FLEET_STANDIN

STANDIN = str(FLEET_STANDIN)
OURS = "ddptui (salloc + one step)"
BASE = "ddptui (base)"
BY_HAND = "srun by hand (one step)"
FLOOR = "floor (spec imported, salloc, plain step)"
PHASES = (
    "to salloc granted",
    "granted to step started",
    "step started to all running",
    "stop to every node proven",
    "proven to released",
)
Sample = dict[str, Any]


def clean(
    cluster: SlurmCluster, timeout: float = 60, keep: Collection[str] = ()
) -> tuple[float | None, int]:
    """Seconds until no node has a stray process and squeue lists no job but those in `keep`
    (other users' jobs, queued); else how many nodes are dirty."""
    t0 = time.monotonic()
    hosts = cluster.tb.hosts
    while True:
        left = {h: p for h, p in slurm_strays(cluster.tb, hosts).items() if p}
        if not left and not set(cluster.squeue_ids()) - set(keep):
            return time.monotonic() - t0, 0
        if time.monotonic() - t0 > timeout:
            return None, len(left)
        time.sleep(0.2)


@contextlib.contextmanager
def slurm_testbed(n: int, name: str) -> Iterator[tuple[SlurmCluster, Path, str]]:
    """N slurmd nodes up and idle (the cluster), a scratch directory (removed after), and the
    sentence that says how long the cluster took to come up."""
    cleanup_stale()
    t0 = time.monotonic()
    tb = Testbed(n).start()
    try:
        cluster = SlurmCluster(tb, cpus=1).start(timeout=300)
        built = time.monotonic() - t0
        version = cluster.run(["sinfo", "-V"], check=False).stdout.strip()
        try:
            with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp_name:
                up = f"{version}: {n} slurmd up and idle {built:.1f} s after the testbed began."
                yield cluster, Path(tmp_name), up
        finally:
            cluster.stop()
    finally:
        tb.close()


def ddptui_run(
    cluster: SlurmCluster, n: int, tmp: Path, tree: Path | None = None, keep: Collection[str] = ()
) -> Sample:
    argv = headless_argv(cluster, n, STANDIN)
    env = cluster_env(cluster, tmp / "state")
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    stream = TimedStream(argv, env=env, cwd=tmp)
    green = stream.until(all_ranks_running(n), timeout=600)
    if green is None or any(e["event"] == "summary" for e in stream.events()):
        stream.proc.send_signal(signal.SIGTERM)
        stream.finish(timeout=300)
        raise RuntimeError(f"ddptui: not all running: {stream.seen[-3:]}")
    t0 = time.monotonic()
    stopped = time.time()
    stream.proc.send_signal(signal.SIGTERM)
    stream.finish(timeout=600)
    teardown = time.monotonic() - t0
    _, dirty = clean(cluster, keep=keep)
    events = stream.events()

    def first(kind: str, state: str = "", after: float = 0.0) -> float:
        times = [
            e["ts"]
            for e in events
            if e["event"] == kind and (not state or e.get("state") == state) and e["ts"] > after
        ]
        return min(times) if times else float("nan")

    granted = first("allocation", "granted")
    launched = first("node", "launched")
    proved = max((e["ts"] for e in events if e["event"] == "teardown"), default=float("nan"))
    released = first("allocation", "released", stopped)
    return {
        "launch": green,
        "granted": granted - stream.wall0,
        # the phases, from the console's own event times (seconds)
        "to salloc granted": granted - stream.wall0,
        "granted to step started": launched - granted,
        "step started to all running": green - (launched - stream.wall0),
        "stop to every node proven": proved - stopped,
        "proven to released": released - proved,
        "teardown": teardown,
        "dirty nodes": dirty,
    }


def headless_argv(cluster: SlurmCluster, n: int, standin: str) -> list[str]:
    """`ddptui run --headless` on the testbed's Slurm: a task per node, `bash STANDIN`."""
    return ddptui_argv(
        cluster.tb,
        *("run", "--headless", "--backend", "slurm", "--nodes", str(n)),
        *("--nproc-per-node", "1", "--hang-timeout", "3600"),
        *("--launcher", f"bash {standin}", "slurm_scale.py"),
    )


def srun_by_hand(
    cluster: SlurmCluster,
    n: int,
    command: Sequence[str],
    cwd: Path,
    flags: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> tuple[TimedStream, float | None]:
    """`srun -N N ... COMMAND` started by hand, until every node's stand-in said it is ready:
    the stream and the seconds that took (None: not all within the timeout)."""
    argv = ["srun", "-N", str(n), "--ntasks-per-node=1", *flags, *command]
    return srun_until_ready(cluster, n, argv, {**cluster.env, **(env or {})}, cwd)


def srun_until_ready(
    cluster: SlurmCluster,
    n: int,
    argv: Sequence[str],
    env: dict[str, str],
    cwd: Path,
    timeout: float = 600,
) -> tuple[TimedStream, float | None]:
    """An srun line (`argv`, in the head namespace) started, until the stand-ins on `n`
    nodes said they are ready: the stream and the seconds that took (None: not in time)."""
    stream = TimedStream(cluster.argv(argv), env=env, cwd=cwd, merge_stderr=True)
    seen: set[str] = set()

    def ready(line: str) -> bool:
        if "fleet stand-in ready" in line:
            seen.add(line.split("host=")[-1].strip())
        return len(seen) == n

    return stream, stream.until(ready, timeout=timeout)


def floor_run(cluster: SlurmCluster, n: int, tmp: Path) -> Sample:
    """What any console that validates the job in Python before asking Slurm, then uses
    salloc and a step, pays at least: the job's models imported (ddptui.cli.jobargs, with
    pydantic), `salloc --no-shell`, then a plain `srun --jobid` of the stand-in; teardown =
    SIGTERM to that srun until it exits, then scancel until squeue no longer lists the job.
    Nothing of ddptui runs: no task program, no stream split, no proof."""
    script = (
        f"{shlex.quote(sys.executable)} -c 'import ddptui.cli.jobargs' && "
        f"out=$(salloc --no-shell -N {n} --ntasks-per-node=1 --cpus-per-task=1 2>&1) && "
        "job=$(printf '%s' \"$out\" | sed -n 's/.*Granted job allocation \\([0-9]*\\).*/\\1/p') && "
        'echo "job=$job" && '
        f"exec srun --jobid=$job -N {n} --ntasks-per-node=1 bash {shlex.quote(STANDIN)}"
    )
    env = {**cluster.env, "PYTHONPATH": str(ROOT)}
    stream, green = srun_until_ready(cluster, n, ["sh", "-c", script], env, tmp)
    jobs = [line.split("=", 1)[1] for _, line in stream.seen if line.startswith("job=")]
    if green is None or not jobs:
        stream.proc.kill()
        raise RuntimeError(f"floor: not all ready: {stream.seen[-3:]}")
    t0 = time.monotonic()
    stream.proc.send_signal(signal.SIGTERM)
    stream.finish(timeout=600)
    cluster.run(["scancel", jobs[0]], check=False)
    while cluster.run(["squeue", "-h", "-j", jobs[0]], check=False).stdout.strip():
        time.sleep(0.02)
    teardown = time.monotonic() - t0
    _, dirty = clean(cluster)
    return {"launch": green, "teardown": teardown, "dirty nodes": dirty}


def srun_run(cluster: SlurmCluster, n: int, tmp: Path, keep: Collection[str] = ()) -> Sample:
    stream, green = srun_by_hand(cluster, n, ["bash", STANDIN], tmp)
    if green is None:
        stream.proc.kill()
        raise RuntimeError(f"srun: not all ready: {stream.seen[-3:]}")
    t0 = time.monotonic()
    stream.proc.send_signal(signal.SIGTERM)
    stream.finish(timeout=600)
    teardown = time.monotonic() - t0
    _, dirty = clean(cluster, keep=keep)
    return {"launch": green, "teardown": teardown, "dirty nodes": dirty}


def tree_report(name: str, title: str, doc: str | None, baseline: Path | None) -> Report:
    """A report that opens with the benchmark's description (its docstring but the first
    line), how the trees are compiled, and the baseline tree if there is one."""
    report = Report(name, title, command_line())
    report.para(doc.split("\n\n", 1)[1].strip() if doc else "")
    report.para(compile_bytecode(*([baseline] if baseline else [])))
    if baseline:
        report.para(f"Baseline `{BASE}`: {describe_tree(baseline)}.")
    return report


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a tree of ddptui (a worktree or an export of a commit) run as `ddptui (base)`",
    )
    args = parser.parse_args()
    n = 4 if args.quick else args.nodes
    reps = 1 if args.quick else args.reps
    report = tree_report("slurm_scale", f"Slurm at scale: {n} slurmd nodes", __doc__, args.baseline)
    with slurm_testbed(n, "slurm-scale") as (cluster, tmp, built):
        report.para(built)
        base = args.baseline
        tools: dict[str, Callable[[int], Sample]] = {
            OURS: lambda _: ddptui_run(cluster, n, tmp),
            BY_HAND: lambda _: srun_run(cluster, n, tmp),
            FLOOR: lambda _: floor_run(cluster, n, tmp),
        }
        if base is not None:
            tools[BASE] = lambda _: ddptui_run(cluster, n, tmp, tree=base)
        runs = interleaved(reps, tools)
    report.section(f"{n} nodes, N={reps} interleaved")
    table = Table(
        ["launch", "to all running (median)", "per node", "teardown (median)", "per node",
         "dirty nodes"]
    )  # fmt: skip
    for tool, samples in runs.items():
        launch = median([s["launch"] for s in samples])
        down = median([s["teardown"] for s in samples])
        table.add(
            tool,
            fmt_s(launch),
            f"{launch / n * 1000:.0f} ms",
            fmt_s(down),
            f"{down / n * 1000:.0f} ms",
            " ".join(str(s["dirty nodes"]) for s in samples),
        )
    report.table(table)
    phases = [k for k in next(iter(runs.values()))[0] if k in PHASES]
    report.section("Where ddptui's time goes (medians, from its own event times)")
    steps = Table(["phase", *[t for t in (OURS, BASE) if t in runs]])
    for phase in phases:
        steps.add(
            phase, *[fmt_s(median([s[phase] for s in runs[t]])) for t in (OURS, BASE) if t in runs]
        )
    report.table(steps)
    by_hand = runs[BY_HAND]
    theirs, down_theirs = (median([s[k] for s in by_hand]) for k in ("launch", "teardown"))
    ratios = []
    for tool in (t for t in (OURS, BASE, FLOOR) if t in runs):
        ours, down = (median([s[k] for s in runs[tool]]) for k in ("launch", "teardown"))
        ratio = f"{tool} / srun by hand, launch: {ours / theirs:.2f}x, teardown: "
        ratio += f"{down / down_theirs:.2f}x"
        if "granted" in runs[tool][0]:  # ddptui's own (the floor has no events)
            granted = median([s["granted"] for s in runs[tool]])
            ratio += f" (its allocation {granted:.2f} s after it started)"
        ratios.append(ratio)
    report.para("; ".join(ratios) + f". Load average at the end: {load_average()}.")
    report.write()


if __name__ == "__main__":
    main()
