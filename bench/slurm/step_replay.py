"""ddptui's Slurm step against a plain one, inside one allocation: what the task program costs
the step's start, without the console around it.

On the project's Slurm testbed (testbed/: slurmctld, one slurmd per host namespace), ddptui
runs once per tree (`ddptui run --headless --backend slurm`, the fleet's stand-in as every
node's command) with an `srun` first on its PATH that writes down its arguments and
environment, then execs the real one: that is ddptui's step exactly as it was started (its
flags, its task program in DDPTUI_STEP_PROGRAM). Then, in one allocation held throughout
(`salloc --no-shell`), interleaved:

- plain: `srun --jobid J -N N --ntasks-per-node=1 bash fleet_standin.sh`;
- each tree's step, replayed: its srun line and environment, the job id changed to J;

each timed from srun's start to every node's ready line, then SIGTERM to srun. The nodes'
addresses and the rendezvous port in a replayed program are this testbed's, as when it was
captured; its tags and logs point into the capture's state directory, kept until the end.
"""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.common.hosts import TimedStream, all_ranks_running
from bench.common.report import Report, Table, arg_parser, command_line, fmt_s, load_average
from bench.common.stats import interleaved, median
from bench.common.trees import compile_bytecode, describe_tree
from bench.slurm.slurm_scale import (
    STANDIN,
    clean,
    headless_argv,
    slurm_testbed,
    srun_until_ready,
)
from testbed import SlurmCluster
from testbed.slurm_ddptui import cluster_env

ROOT = Path(__file__).resolve().parents[2]
# The first srun the console runs is its step (a reap step at teardown would come later).
WRAPPER = """#!/bin/sh
if [ ! -e "{out}/argv" ]; then
    printf '%s\\0' "$@" > "{out}/argv"
    env -0 > "{out}/env"
fi
exec {srun} "$@"
"""
Step = tuple[list[str], dict[str, str]]


def capture_step(cluster: SlurmCluster, n: int, tree: Path, tmp: Path) -> Step:
    """ddptui's step as `tree` starts it: srun's argv and environment."""
    out = Path(tempfile.mkdtemp(dir=tmp))
    wrap = out / "bin"
    wrap.mkdir()
    (wrap / "srun").write_text(WRAPPER.format(out=out, srun=shutil.which("srun")))
    (wrap / "srun").chmod(0o755)
    env = cluster_env(cluster, out / "state", PYTHONPATH=str(tree))
    env["PATH"] = f"{wrap}:{env['PATH']}"
    stream = TimedStream(headless_argv(cluster, n, STANDIN), env=env, cwd=tmp)
    green = stream.until(all_ranks_running(n), timeout=300)
    stream.proc.send_signal(signal.SIGTERM)
    stream.finish(timeout=300)
    clean(cluster)
    if green is None:
        raise RuntimeError(f"ddptui ({tree}): not all running: {stream.seen[-3:]}")
    argv = [w.decode() for w in (out / "argv").read_bytes().split(b"\0")[:-1]]
    pairs = (kv.decode().split("=", 1) for kv in (out / "env").read_bytes().split(b"\0")[:-1])
    return ["srun", *argv], {k: v for k, v in (p for p in pairs if len(p) == 2)}


def replay(cluster: SlurmCluster, n: int, argv: list[str], env: dict[str, str]) -> float:
    """Seconds from srun's start to every node's ready line."""
    stream, green = srun_until_ready(cluster, n, argv, env, Path("/tmp"), timeout=120)
    stream.proc.send_signal(signal.SIGTERM)
    stream.finish(timeout=120)
    if green is None:
        raise RuntimeError(f"{argv[:3]}: not all ready: {stream.seen[-3:]}")
    return green


def _replayer(
    cluster: SlurmCluster, n: int, argv: list[str], env: dict[str, str]
) -> Callable[[int], float]:
    return lambda _: replay(cluster, n, argv, env)


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--baseline", type=Path, help="another tree of ddptui, replayed too")
    args = parser.parse_args()
    n = 4 if args.quick else args.nodes
    reps = 2 if args.quick else args.reps
    trees = {"ddptui's step": ROOT}
    if args.baseline:
        trees["ddptui's step (base)"] = args.baseline.resolve()
    report = Report("slurm_step_replay", f"ddptui's Slurm step, replayed: {n} nodes",
                    command_line())  # fmt: skip
    report.para(__doc__.split("\n\n", 1)[1].strip() if __doc__ else "")
    report.para(compile_bytecode(*trees.values()))
    if args.baseline:
        report.para(f"Baseline: {describe_tree(args.baseline)}")
    with slurm_testbed(n, "step-replay") as (cluster, tmp, built):
        report.para(built)
        steps = {name: capture_step(cluster, n, tree, tmp) for name, tree in trees.items()}
        got = cluster.run(["salloc", "--no-shell", "-N", str(n), "-J", "bench-replay"])
        found = re.search(r"Granted job allocation (\d+)", got.stderr)
        if found is None:
            raise RuntimeError(f"salloc: {got.stderr.strip()}")
        job = found.group(1)
        try:
            plain = ["srun", f"--jobid={job}", f"-N{n}", "--ntasks-per-node=1", "bash", STANDIN]
            variants = {"plain step": _replayer(cluster, n, plain, dict(cluster.env))}
            for name, (argv, env) in steps.items():
                moved = [f"--jobid={job}" if w.startswith("--jobid=") else w for w in argv]
                variants[name] = _replayer(cluster, n, moved, env)
            runs = interleaved(reps, variants)
        finally:
            cluster.run(["scancel", job])
            clean(cluster)
    report.section(f"srun's start to every node's ready line, {n} nodes, N={reps} interleaved")
    table = Table(["step", "median", "over the plain step", "each run"])
    base = median(runs["plain step"])
    for name, samples in runs.items():
        over = median(samples) - base
        table.add(name, fmt_s(median(samples)), "" if name == "plain step" else f"{over:+.3f} s",
                  " ".join(f"{s:.2f}" for s in samples))  # fmt: skip
    report.table(table)
    spread = {k: statistics.pstdev(v) for k, v in runs.items()}
    report.para("Spread (population standard deviation): "
                + ", ".join(f"{k} {v:.3f} s" for k, v in spread.items()) + f". Load average at "
                f"the end: {load_average()}.")  # fmt: skip
    report.write()


if __name__ == "__main__":
    main()
