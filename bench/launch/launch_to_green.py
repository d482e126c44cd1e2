"""Launch to all-green: ddptui headless vs the same torchrun commands started by hand.

"All green" is the moment every rank runs: for ddptui the first `rank` event in state running
of every rank, for the by-hand launch the `envcheck host=... rank=R` line (envcheck's first line)
of every rank. Both launches run the identical per-node command (ddptui's own planner builds
the by-hand one), so the ratio is the cost of ddptui's orchestration. Profiles: the namespace
testbed (2 hosts x 2 procs, by hand: a shell script of `ssh host '...' &` lines) and the local
profile (2 local agents x 2 procs, by hand: two `torchrun ... &` from a shell).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common.hosts import (
    ENVCHECK,
    TimedStream,
    all_envcheck_lines,
    all_ranks_running,
    bench_env,
    by_hand_script,
    ddptui_ssh_argv,
    job_leftovers,
    open_testbed,
    ssh_commands,
    ssh_line,
    wait_clean,
)
from bench.common.report import Report, Table, arg_parser, command_line, fmt_s, ratio, verdict
from bench.common.stats import interleaved, median
from bench.common.trees import compile_bytecode
from ddptui.core.backends.local import LocalBackend, free_port
from ddptui.core.job.plan import NodeTarget
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.run_dir import RunDir
from testbed import Testbed

TARGET = 1.05  # SSH: at most 1.05x by hand at 2 hosts
WORLD = 4
Sample = dict[str, Any]


def _phases(stream: TimedStream) -> dict[str, float]:
    """When ddptui reached each step, in seconds since its process was started."""
    events = stream.events()

    def first(match: Callable[[dict[str, Any]], bool]) -> float:
        stamps = [e["ts"] for e in events if match(e)]
        return (min(stamps) - stream.wall0) if stamps else float("nan")

    def last(match: Callable[[dict[str, Any]], bool]) -> float:
        stamps = [e["ts"] for e in events if match(e)]
        return (max(stamps) - stream.wall0) if stamps else float("nan")

    return {
        "first event": first(lambda e: True),
        "nodes granted": first(lambda e: e["event"] == "allocation" and e["state"] == "granted"),
        "all launched": last(lambda e: e["event"] == "node" and e["state"] == "launched"),
    }


def _ddptui(argv: list[str], state: Path, cwd: Path) -> Sample:
    stream = TimedStream(argv, env=bench_env(state), cwd=cwd)
    green = stream.until(all_ranks_running(WORLD))
    code = stream.finish()
    events = stream.events()
    if green is None or code != 0:
        raise RuntimeError(f"ddptui run failed (exit {code}): {events[-3:]}")
    return {"green": green, **_phases(stream)}


def _by_hand(argv: list[str], cwd: Path) -> Sample:
    stream = TimedStream(argv, cwd=cwd, merge_stderr=True)
    green = stream.until(all_envcheck_lines(WORLD))
    code = stream.finish()
    if green is None or code != 0:
        raise RuntimeError(f"by-hand run failed (exit {code}): {stream.seen[-5:]}")
    return {"green": green}


def ssh_profile(tb: Testbed, reps: int, tmp: Path) -> dict[str, list[Sample]]:
    hosts = ["node1", "node2"]
    port = iter(range(29500, 29800))

    def ddptui(_: int) -> Sample:
        sample = _ddptui(
            ddptui_ssh_argv(tb, "--hosts", "node[1-2]", "--rdzv-port", str(next(port)), ENVCHECK),
            tmp / "state",
            tmp,
        )
        if wait_clean(tb, hosts)[0] is None:
            raise RuntimeError(f"left behind: {job_leftovers(tb, hosts)}")
        return sample

    def by_hand(i: int) -> Sample:
        lines = [ssh_line(tb, c) for c in ssh_commands(tb, hosts, 2, next(port))]
        script = by_hand_script(tmp / f"by-hand-ssh-{i}.sh", lines)
        sample = _by_hand(tb.ns_argv(tb.head, ["sh", str(script)]), tmp)
        wait_clean(tb, hosts)
        return sample

    ddptui(-1), by_hand(-1)  # warm the page cache (torch import) for both alike
    return interleaved(reps, {"ddptui": ddptui, "by hand": by_hand})


def local_profile(reps: int, tmp: Path) -> dict[str, list[Sample]]:
    def ddptui(_: int) -> Sample:
        argv = [
            sys.executable,
            "-m",
            "ddptui.cli",
            "run",
            "--headless",
            "--rdzv-port",
            str(free_port()),
            ENVCHECK,
        ]
        return _ddptui(argv, tmp / "state", tmp)

    def by_hand(i: int) -> Sample:
        spec = make_spec(script=ENVCHECK, rdzv_port=free_port(), workdir=str(tmp))
        run = RunDir.create(f"by-hand-{i}-{datetime.now():%H%M%S%f}", root=tmp / "by-hand")
        backend = LocalBackend(spec, run, lambda _: None)
        nodes = [NodeTarget(f"local{n}", "127.0.0.1") for n in range(spec.nodes)]
        plan = backend.plan(nodes, spec.rdzv_port or 0)
        script = by_hand_script(
            tmp / f"by-hand-local-{i}.sh", [c.shell_line() for c in plan.commands]
        )
        return _by_hand(["sh", str(script)], tmp)

    ddptui(-1), by_hand(-1)
    return interleaved(reps, {"ddptui": ddptui, "by hand": by_hand})


def summarize(report: Report, profile: str, runs: dict[str, list[Sample]]) -> float:
    ours = [s["green"] for s in runs["ddptui"]]
    theirs = [s["green"] for s in runs["by hand"]]
    table = Table(["launch", "median to all-green", "min", "max", "runs (s)"])
    for name, values in (("ddptui headless", ours), ("by hand", theirs)):
        table.add(
            name,
            fmt_s(median(values)),
            fmt_s(min(values)),
            fmt_s(max(values)),
            " ".join(f"{v:.2f}" for v in values),
        )
    report.table(table)
    r = median(ours) / median(theirs)
    report.para(
        f"**{profile}: ddptui / by hand = {ratio(median(ours), median(theirs))}** "
        f"(target <= {TARGET:.2f}x: {verdict(r <= TARGET, f'{r / TARGET - 1:+.0%}')}), "
        f"{median(ours) - median(theirs):+.2f} s."
    )
    phases = Table(["ddptui step (median, s since start)", "seconds"])
    for key in ("first event", "nodes granted", "all launched", "green"):
        phases.add(
            key if key != "green" else "all ranks running",
            fmt_s(median([s[key] for s in runs["ddptui"]])),
        )
    report.table(phases)
    return r


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--profile", choices=["ssh", "local", "both"], default="both")
    args = parser.parse_args()
    reps = 2 if args.quick else args.reps
    report = Report("launch_to_green", "Launch to all-green", command_line())
    report.para(__doc__.split("\n\n", 1)[1].strip() if __doc__ else "")
    report.para(compile_bytecode())
    report.para(
        f"N={reps} interleaved repetitions per launch (after one warm-up each); "
        f"{WORLD} ranks (2 nodes x 2 processes), trainer/envcheck.py."
    )
    with tempfile.TemporaryDirectory(prefix="bench-green-") as tmp_name:
        tmp = Path(tmp_name)
        if args.profile in ("ssh", "both"):
            report.section("Namespace testbed: 2 hosts x 2 procs over SSH (asyncssh)")
            tb = open_testbed(2)
            try:
                summarize(report, "SSH testbed", ssh_profile(tb, reps, tmp))
            finally:
                tb.close()
        if args.profile in ("local", "both"):
            report.section("Local profile: 2 local agents x 2 procs")
            summarize(report, "local", local_profile(reps, tmp))
    report.section("Notes")
    report.para(
        "By hand means the identical per-node command (`cd`, environment, torchrun flags "
        "including `--tee=3`), started from `sh` with one background job per node; the clock "
        "stops at the last rank's first line. ddptui's clock starts when `python -m ddptui.cli` "
        "is spawned, so its time includes Python start-up and imports (the first wave's TCP "
        "connects go out as soon as the command line is read: bench/launch/startup.py), connecting "
        "every host (asyncssh), and starting the agents detached through the node helper. "
        "Remote commands per host: one, by hand and with ddptui alike: "
        "ddptui's `launch` checks the rendezvous port on the first host, picks the socket "
        "interface, starts the agent and streams its log in one remote `python3 -S` (no "
        "site-packages: their .pth files cost 0.05-0.3 s per command here). Every remote "
        "command runs root's .bashrc `pyenv init` first (0.2-0.4 s of CPU on this machine, "
        "see fanout.md), by hand too. Most of the time to all-green "
        "is torchrun and the workers starting on 2 shared cores, which is why single runs "
        "vary by seconds."
    )
    report.write()


if __name__ == "__main__":
    main()
