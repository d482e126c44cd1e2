"""Teardown: from the teardown request to every host proven clean, on the SSH and Slurm testbeds.

SSH: each run starts 2 hosts x 2 procs of `envcheck.py --sleep 300` with `ddptui run --headless`,
waits until every rank runs, then asks for teardown (SIGTERM to the console, as Ctrl-C or
`kill` would). Three clocks from that request: ddptui's own proof (the last TeardownReport,
clean), the benchmark's independent check (no process other than sshd left in either host's
network namespace, polled every 20 ms) and the console's exit. Orphans are processes still
in a host namespace 10 s after the console exited. One run cuts node2's link while the job
runs, waits for ddptui to notice, restores it, then tears down.

The alternative, in the same run: the same commands started by hand with `ssh -tt` (a
terminal, so that closing the session hangs the job up) and torn down by ending those ssh
clients, as closing the terminal would. Without `-tt` nothing would stop the job at all.

Slurm: the same job through `ddptui run --headless --backend slurm` (salloc, one srun step
per node) on the testbed's real Slurm 22.05 (slurmctld in the head namespace, one slurmd
per host namespace), against the manual procedure: the sbatch + srun + torchrun batch
script, torn down with `scancel`. See SLURM_ABOUT below.

`--only slurm|ssh` runs one part and keeps the other part's sections of
bench/results/teardown.md as they are (everything from the first `## Slurm` heading on is
the Slurm part).
"""

from __future__ import annotations

import json
import signal
import tempfile
import time
from pathlib import Path

from bench.common.hosts import (
    ENVCHECK,
    TimedStream,
    all_ranks_running,
    bench_env,
    ddptui_ssh_argv,
    job_leftovers,
    open_testbed,
    ssh_argv,
    ssh_commands,
)
from bench.common.report import Report, arg_parser, command_line
from bench.common.stats import interleaved
from bench.common.trees import RESULTS
from bench.teardown.runs import (
    HOSTS,
    ORPHAN_WAIT_S,
    LaunchFailed,
    Sample,
    engine_table,
    failures_para,
    retried,
    verdict_para,
)
from bench.teardown.slurm_part import slurm_part
from testbed import Testbed


def _watch_clean(tb: Testbed, since: float, timeout: float = 30.0) -> float:
    """Seconds from `since` until both host namespaces hold nothing but sshd (inf: never)."""
    while job_leftovers(tb, HOSTS):
        if time.monotonic() - since > timeout:
            return float("inf")
        time.sleep(0.02)
    return time.monotonic() - since


def _orphans(tb: Testbed) -> list[str]:
    """What is left 10 s after the tool is done; removed (by PID) so the next run starts clean."""
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while (left := job_leftovers(tb, HOSTS)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        tb.reset()
    return [f"{host}: {p}" for host, pids in left.items() for p in pids]


def ddptui_run(tb: Testbed, tmp: Path, port: int, engine: str, cut: bool = False) -> Sample:
    stream = TimedStream(
        ddptui_ssh_argv(
            tb,
            "--hosts",
            "node[1-2]",
            "--ssh-engine",
            engine,
            "--rdzv-port",
            str(port),
            ENVCHECK,
            "--sleep",
            "300",
        ),
        env=bench_env(tmp / "state"),
        cwd=tmp,
    )
    if stream.until(all_ranks_running(4), timeout=240) is None or any(
        e["event"] == "summary" for e in stream.events()
    ):
        stream.proc.kill()
        stream.finish()
        raise LaunchFailed(
            json.dumps([e for e in stream.events() if e["event"] in ("summary", "notice")][-3:])
        )
    if cut:
        tb.cut_link("node2")
        noticed = stream.until(
            lambda line: '"notice"' in line and "node2" in line and "reconnecting" in line,
            timeout=120,
        )
        tb.restore_link("node2")
        if noticed is None:
            raise RuntimeError("ddptui never noticed the cut link")
    reports: dict[str, bool] = {}

    def all_reported(line: str) -> bool:
        if line.startswith("{"):
            event = json.loads(line)
            if event["event"] == "teardown":
                reports[event["node"]] = bool(event["clean"])
        return len(reports) == len(HOSTS)

    asked = time.monotonic()
    stream.proc.send_signal(signal.SIGTERM)
    verified = _watch_clean(tb, asked)
    reported = stream.until(all_reported, timeout=60)
    stream.finish()
    exited = time.monotonic() - asked
    orphans = _orphans(tb)
    per_node = {
        e["node"]: f"{e['detail']} ({'clean' if e['clean'] else 'NOT clean'})"
        for e in stream.events()
        if e["event"] == "teardown"
    }
    return {
        "reported clean": (reported + stream.t0 - asked) if reported is not None else float("inf"),
        "verified clean": verified,
        "console exited": exited,
        "reported per node": per_node,
        "ddptui says clean": all(reports.values()) and len(reports) == len(HOSTS),
        "orphans": len(orphans),
        "orphan list": orphans,
    }


def by_hand_run(tb: Testbed, port: int) -> Sample:
    streams = [
        TimedStream(
            tb.ns_argv(tb.head, ssh_argv(tb, c, tty=True)), merge_stderr=True, open_stdin=True
        )
        for c in ssh_commands(tb, HOSTS, 2, port, ["--sleep", "300"])
    ]
    for stream in streams:
        count = {"n": 0}

        def two_ranks(line: str, count: dict[str, int] = count) -> bool:
            count["n"] += "envcheck host=" in line
            return count["n"] == 2

        if stream.until(two_ranks, timeout=240) is None:
            for each in streams:
                each.proc.terminate()
                each.finish(timeout=30)
            _orphans(tb)
            raise LaunchFailed(f"by hand: {[line for _, line in stream.seen[-3:]]}")
    asked = time.monotonic()
    for stream in streams:
        stream.proc.send_signal(signal.SIGTERM)
    verified = _watch_clean(tb, asked)
    for stream in streams:
        stream.finish(timeout=30)
    orphans = _orphans(tb)
    return {"verified clean": verified, "orphans": len(orphans), "orphan list": orphans}


def ssh_part(report: Report, runs: int, p_runs: int) -> None:
    report.para("\n\n".join(__doc__.split("\n\n")[1:3]) if __doc__ else "")
    port = iter(range(29900, 30900))
    tb = open_testbed(2)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-teardown-") as tmp_name:
            tmp = Path(tmp_name)
            report.section(f"SSH testbed, asyncssh: {runs} runs, interleaved with by hand")
            failures: list[str] = []
            main_runs = interleaved(
                runs,
                {
                    "ddptui (asyncssh)": retried(
                        lambda _: ddptui_run(tb, tmp, next(port), "asyncssh"), failures
                    ),
                    "by hand (ssh -tt, end the clients)": retried(
                        lambda _: by_hand_run(tb, next(port)), failures
                    ),
                },
            )
            engine_table(report, main_runs)
            verdict_para(
                report,
                main_runs["ddptui (asyncssh)"],
                main_runs["by hand (ssh -tt, end the clients)"],
            )
            report.section(f"SSH testbed, paramiko: {p_runs} runs")
            p = interleaved(
                p_runs,
                {
                    "ddptui (paramiko)": retried(
                        lambda _: ddptui_run(tb, tmp, next(port), "paramiko"), failures
                    )
                },
            )
            engine_table(report, p)
            report.section("A host's link cut while the job runs (cut, restore, then teardown)")
            cut = interleaved(
                1,
                {
                    "ddptui (asyncssh), link cut": retried(
                        lambda _: ddptui_run(tb, tmp, next(port), "asyncssh", cut=True), failures
                    ),
                    "ddptui (paramiko), link cut": retried(
                        lambda _: ddptui_run(tb, tmp, next(port), "paramiko", cut=True), failures
                    ),
                },
            )
            engine_table(report, cut)
            report.section("Launches that failed before every rank ran (redone, not counted)")
            failures_para(report, failures)
    finally:
        tb.close()


def write(report: Report, only: str) -> None:
    """Write the report; a one-part run keeps the other part's sections of the existing file."""
    if only == "all":
        report.write()
        return
    path = RESULTS / f"{report.name}.md"
    old = path.read_text() if path.exists() else ""
    new = report.markdown()
    cut_old = old.find("\n## Slurm")
    if only == "slurm":
        head = old[:cut_old] if cut_old >= 0 else old.rstrip("\n") + "\n"
        body = new[new.find("\n## ") :]
        text = head.rstrip("\n") + "\n" + body
    else:
        cut_new = new.find("\n## Slurm")
        text = (new[:cut_new] if cut_new >= 0 else new).rstrip("\n") + "\n"
        if cut_old >= 0:
            text += old[cut_old:]
    path.write_text(text)
    print(f"\nwritten: {path} ({only} part replaced)")


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--paramiko-runs", type=int, default=5)
    parser.add_argument("--slurm-runs", type=int, default=20)
    parser.add_argument("--only", choices=("all", "ssh", "slurm"), default="all")
    args = parser.parse_args()
    report = Report("teardown", "Teardown: request to every host proven clean", command_line())
    if args.only != "slurm":
        ssh_part(report, 2 if args.quick else args.runs, 1 if args.quick else args.paramiko_runs)
    if args.only != "ssh":
        slurm_part(report, 2 if args.quick else args.slurm_runs)
    write(report, args.only)


if __name__ == "__main__":
    main()
