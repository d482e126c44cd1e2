"""Teardown: from the teardown request to every host proven clean, on the SSH testbed.

Each run starts 2 hosts x 2 procs of `envcheck.py --sleep 300` with `ddptui run --headless`,
waits until every rank runs, then asks for teardown (SIGTERM to the console, as Ctrl-C or
`kill` would). Three clocks from that request: ddptui's own proof (the last TeardownReport,
clean), the benchmark's independent check (no process other than sshd left in either host's
network namespace, polled every 20 ms) and the console's exit. Orphans are processes still
in a host namespace 10 s after the console exited. One run cuts node2's link while the job
runs, waits for ddptui to notice, restores it, then tears down.

The alternative, in the same run: the same commands started by hand with `ssh -tt` (a
terminal, so that closing the session hangs the job up) and torn down by ending those ssh
clients, as closing the terminal would. Without `-tt` nothing would stop the job at all.
"""

from __future__ import annotations

import json
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import (
    Report,
    Table,
    arg_parser,
    command_line,
    fmt_s,
    interleaved,
    median,
    ratio,
    verdict,
)
from bench._hosts import (
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
from tests.testbed import Testbed

HOSTS = ["node1", "node2"]
TARGET_S = 5.0
ORPHAN_WAIT_S = 10.0
RETRIES = 3
Sample = dict[str, Any]


class LaunchFailed(RuntimeError):
    """The job ended before every rank ran: not a teardown to measure; the run is redone."""


def retried(run: Callable[[int], Sample], failures: list[str]) -> Callable[[int], Sample]:
    """A failed launch (torch/gloo can fail on this box) is noted and the run redone."""

    def again(i: int) -> Sample:
        for _ in range(RETRIES):
            try:
                return run(i)
            except LaunchFailed as exc:
                failures.append(str(exc))
                print(f"  launch failed, redone: {exc}", flush=True)
        return run(i)

    return again


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


def _engine_table(report: Report, runs: dict[str, list[Sample]]) -> None:
    table = Table(["teardown", "runs", "clock", "median", "max", "orphans (total)"])
    for name, samples in runs.items():
        clocks = [
            c for c in ("reported clean", "verified clean", "console exited") if c in samples[0]
        ]
        for clock in clocks:
            values = [s[clock] for s in samples]
            table.add(
                name,
                len(samples),
                clock,
                fmt_s(median(values)),
                fmt_s(max(values)),
                sum(s["orphans"] for s in samples),
            )
    report.table(table)
    for name, samples in runs.items():
        if len(samples) == 1 and "reported per node" in samples[0]:
            nodes = "; ".join(f"{n}: {d}" for n, d in samples[0]["reported per node"].items())
            report.para(f"{name}: TeardownReports: {nodes}.")
    left = [o for samples in runs.values() for s in samples for o in s["orphan list"]]
    if left:
        report.para("Orphans: " + "; ".join(left[:20]))


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--paramiko-runs", type=int, default=5)
    args = parser.parse_args()
    runs = 2 if args.quick else args.runs
    p_runs = 1 if args.quick else args.paramiko_runs
    report = Report("teardown", "Teardown: request to every host proven clean", command_line())
    report.para(__doc__.split("\n\n", 1)[1].strip() if __doc__ else "")
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
            _engine_table(report, main_runs)
            ours = [
                max(s["reported clean"], s["verified clean"])
                for s in main_runs["ddptui (asyncssh)"]
            ]
            theirs = [s["verified clean"] for s in main_runs["by hand (ssh -tt, end the clients)"]]
            orphans = sum(s["orphans"] for v in main_runs.values() for s in v)
            report.para(
                f"ddptui (proven clean: reported and verified) / by hand (verified clean), "
                f"medians: {ratio(median(ours), median(theirs))}. Target <= {TARGET_S:.0f} s "
                f"(ddptui's worst of {len(ours)} runs: {fmt_s(max(ours))}): "
                f"{verdict(max(ours) <= TARGET_S, f'{max(ours) - TARGET_S:+.2f} s')}; "
                f"orphans {orphans}: {verdict(orphans == 0)}."
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
            _engine_table(report, p)
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
            _engine_table(report, cut)
            report.section("Launches that failed before every rank ran (redone, not counted)")
            report.para(
                f"{len(failures)} launch(es) redone"
                + (": " + "; ".join(f"`{f[:300]}`" for f in failures) if failures else ".")
            )
    finally:
        tb.close()
    # -- Slurm ------------------------------------------------------------------------------
    # SLURM SECTION: to be added once ddptui/core/backends/slurm.py is complete. The same
    # three clocks apply: SIGTERM to `ddptui run --headless --backend slurm ...` on the
    # testbed's SlurmCluster (tests/testbed/slurm.py), then no job process left in any slurmd
    # host namespace and `squeue` empty for the run's job.
    report.section("Slurm")
    report.para(
        "Not measured yet: the Slurm backend was being built in parallel. The place "
        "for it is marked `SLURM SECTION` in bench/teardown.py."
    )
    report.write()


if __name__ == "__main__":
    main()
