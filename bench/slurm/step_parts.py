"""Where a Slurm step's start goes at scale: srun by hand against variants of it, and
ddptui's step timed from inside.

On the project's Slurm testbed (testbed/: slurmctld, one slurmd per host namespace), each
variant is `srun -N N --ntasks-per-node=1 ...` of the fleet's stand-in, timed from srun's
start to every node's ready line, interleaved:

- plain: `bash fleet_standin.sh`, as the by-hand row of slurm_scale;
- 18 KB in env: the same with an unused 18 KB variable in srun's environment (ddptui's
  step carries its task program there);
- task work: `sh -c` doing what ddptui's task does before its command (`ip` for the
  node's interface, `command -v nvidia-smi`, a subshell with stdin from /dev/null);
- task work + Python: the same, and on the first node a Python that binds the rendezvous
  port (the head's port check);
- --input=none: plain, with srun's stdin to the tasks closed.

Then ddptui itself (`ddptui run --headless --backend slurm`) with a stand-in that stamps
its ready line with the node's wall clock: from the step's start (the `launched` event) to
the first and last ready line, to the last rank shown running, and the console's own CPU
time from its exec to every rank running.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common.hosts import TimedStream, all_ranks_running
from bench.common.report import Report, Table, arg_parser, command_line, fmt_s
from bench.common.stats import interleaved, median
from bench.slurm.slurm_scale import clean, headless_argv, slurm_testbed, srun_by_hand
from testbed import SlurmCluster
from testbed.slurm_ddptui import cluster_env
from testbed.standins import FLEET_STANDIN

STANDIN = str(FLEET_STANDIN)
TASK_WORK = (
    "ip -o -4 addr show to 127.0.0.1/32 >/dev/null 2>&1; "
    "command -v nvidia-smi >/dev/null 2>&1; "
    f"trap : TERM; ( exec bash {STANDIN} ) </dev/null"
)
HEAD_PYTHON = (
    '[ "$SLURM_NODEID" = 0 ] && python3 -S -c '
    "\"import socket; socket.socket().bind(('', 29400))\"; "
)
# The stand-in, its ready line stamped with the node's wall clock.
STAMPED = (
    'if [ -n "$DDPTUI_TAG" ]; then rank=${DDPTUI_TAG##*.}; else rank=0; fi\n'
    'echo "[ddptui:$rank:0]:fleet stand-in ready host=$HOSTNAME t=$(date +%s.%N)"\n'
    "exec -a ddptui-fleet-standin sleep 86400\n"
)
READY = re.compile(r"ddptui:(\d+):0\]:fleet stand-in ready .* t=([\d.]+)")


def srun_variant(cluster: SlurmCluster, n: int, flags: list[str], command: list[str],
                 env: dict[str, str]) -> float:  # fmt: skip
    stream, green = srun_by_hand(cluster, n, command, Path("/tmp"), flags, env)
    stream.proc.send_signal(signal.SIGTERM)
    stream.finish(timeout=300)
    clean(cluster)
    if green is None:
        raise RuntimeError(f"srun {flags} {command[:2]}: not all ready: {stream.seen[-3:]}")
    return green


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ddptui_step(cluster: SlurmCluster, n: int, tmp: Path) -> dict[str, Any]:
    standin = tmp / "stamped_standin.sh"
    standin.write_text(STAMPED)
    state = Path(tempfile.mkdtemp(dir=tmp))
    stream = TimedStream(headless_argv(cluster, n, str(standin)), env=cluster_env(cluster, state),
                         cwd=tmp)  # fmt: skip
    green = stream.until(all_ranks_running(n), timeout=300)
    cpu = _cpu_s(stream.proc.pid)
    stream.proc.send_signal(signal.SIGTERM)
    stream.finish(timeout=300)
    clean(cluster)
    if green is None:
        raise RuntimeError(f"ddptui: not all running: {stream.seen[-3:]}")
    events = stream.events()
    start = min(e["ts"] for e in events if e["event"] == "node" and e.get("state") == "launched")
    running = {
        e["rank"]: e["ts"] for e in events if e["event"] == "rank" and e.get("state") == "running"
    }
    ready: dict[int, float] = {}
    for log in state.glob("runs/*/nodes/*.log"):
        for found in READY.finditer(log.read_text()):
            ready[int(found.group(1))] = float(found.group(2))
    return {
        "launch": green,
        "step start to first ready line": min(ready.values()) - start,
        "step start to last ready line": max(ready.values()) - start,
        "last ready line to last running": max(running.values()) - max(ready.values()),
        "a line to its rank running (median)": statistics.median(
            running[r] - t for r, t in ready.items() if r in running
        ),
        "console CPU, exec to all running": cpu,
    }


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    n = 4 if args.quick else args.nodes
    reps = 1 if args.quick else args.reps
    report = Report("slurm_step_parts", f"Where a Slurm step's start goes: {n} nodes",
                    command_line())  # fmt: skip
    report.para(__doc__.split("\n\n", 1)[1].strip() if __doc__ else "")
    with slurm_testbed(n, "step-parts") as (cluster, tmp, _):
        plain = ["bash", STANDIN]
        pad = {"DDPTUI_BENCH_PADDING": "x" * 18_000}
        variants: dict[str, Callable[[int], Any]] = {
            "plain": lambda _: srun_variant(cluster, n, [], plain, {}),
            "18 KB in env": lambda _: srun_variant(cluster, n, [], plain, pad),
            "task work": lambda _: srun_variant(cluster, n, [], ["sh", "-c", TASK_WORK], {}),
            "task work + Python": lambda _: srun_variant(
                cluster, n, [], ["sh", "-c", HEAD_PYTHON + TASK_WORK], {}
            ),
            "--input=none": lambda _: srun_variant(cluster, n, ["--input=none"], plain, {}),
            "ddptui": lambda _: ddptui_step(cluster, n, tmp),
        }
        runs = interleaved(reps, variants)
    report.section(f"srun by hand and its variants, {n} nodes, N={reps} interleaved")
    table = Table(["variant", "to all ready (median)", "each run"])
    for name, samples in runs.items():
        if name == "ddptui":
            continue
        table.add(name, fmt_s(median(samples)), " ".join(f"{s:.2f}" for s in samples))
    report.table(table)
    report.section("ddptui's step from inside (medians)")
    inside = Table(["", "ddptui"])
    for key in runs["ddptui"][0]:
        inside.add(key, fmt_s(median([s[key] for s in runs["ddptui"]])))
    report.table(inside)
    report.write()


if __name__ == "__main__":
    main()
