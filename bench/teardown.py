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
import os
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._common import (
    RESULTS,
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
    all_envcheck_lines,
    all_ranks_running,
    bench_env,
    ddptui_ssh_argv,
    job_leftovers,
    open_testbed,
    ssh_argv,
    ssh_commands,
)
from ddptui.core.slurmplan import batch_script
from ddptui.core.spec import make_spec
from tests.integration.slurmrun import cluster_env, ddptui_argv, headless_run_args
from tests.testbed import SlurmCluster, Testbed, cleanup_stale
from tests.testbed.processes import _terminate, _wait_gone, cmdline

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
            _engine_table(report, main_runs)
            _verdict(
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
            _failures(report, failures)
    finally:
        tb.close()


def _verdict(report: Report, ddptui: list[Sample], by_hand: list[Sample]) -> None:
    ours = [max(s["reported clean"], s["verified clean"]) for s in ddptui]
    theirs = [s["verified clean"] for s in by_hand]
    orphans = sum(s["orphans"] for s in [*ddptui, *by_hand])
    report.para(
        f"ddptui (proven clean: reported and verified) / by hand (verified clean), "
        f"medians: {ratio(median(ours), median(theirs))}. Target <= {TARGET_S:.0f} s "
        f"(ddptui's worst of {len(ours)} runs: {fmt_s(max(ours))}): "
        f"{verdict(max(ours) <= TARGET_S, f'{max(ours) - TARGET_S:+.2f} s')}; "
        f"orphans {orphans}: {verdict(orphans == 0)}."
    )


def _failures(report: Report, failures: list[str]) -> None:
    report.para(
        f"{len(failures)} launch(es) redone"
        + (": " + "; ".join(f"`{f[:300]}`" for f in failures) if failures else ".")
    )


# -- Slurm ----------------------------------------------------------------------------------

SLURM_ABOUT = """\
ddptui: `ddptui run --headless --backend slurm --nodes 2 --nproc-per-node 2 envcheck.py
--sleep 300` in the head namespace (salloc --no-shell, one srun step per node), SIGTERM once
every rank runs. Its proof is the last of the TeardownReports (one per node, each the node
shim's reap run on that node through `srun --overlap`) and the `allocation released` event
(scancel, then squeue no longer lists the job): both processes and allocation, as the
console promises. The independent check polls every 20 ms: no process other than slurmd in
either node's network namespace (slurmstepd, torchrun, workers and ddptui's own helper steps
all count) and, at the same moment, the job id gone from `squeue`. Orphans: any process in
a node or head namespace (other than the daemons) or the job still in squeue, 10 s after
the console exited.

By hand: the sbatch + srun + torchrun procedure of the seed documents, in the batch script
ddptui's own planner writes for it (`batch_script`: the first host of
`scontrol show hostnames $SLURM_JOB_NODELIST` is the rendezvous head, then
`srun --ntasks-per-node=1 bash -c run_node` runs the same torchrun line on every node),
submitted with `sbatch` and torn down with `scancel <jobid>` once every rank printed; clock
from scancel to the same independent check. Runs alternate ddptui, by hand, ddptui, ..."""


STEP_VS_JOB = """\
Reading it: ddptui first signals each node's step with `scancel --signal=TERM JOB.STEP`
(torchrun forwards SIGTERM to its workers, a script can checkpoint) and waits for the steps
to end; only a step still there after the grace gets `scancel JOB.STEP`, which in Slurm 22.05
kills its tasks with SIGKILL at once (a step's `trap ... TERM` never runs). Most of ddptui's
time is torchrun's own graceful shutdown (until "slurmstepd first gone"); the rest is its
proof (the reap helper step on each node through `srun --overlap`) and the release (scancel of
the job, then squeue). `scancel JOB` by hand sends SIGTERM too, but the step's task is
`bash -c run_node`, which dies at once: the step is over while the agent still shuts down
(see the line above), and nothing but the agent itself ends it then. KillWait does not
come into either clock."""


def open_slurm() -> SlurmCluster:
    """A fresh 2-host testbed (no sshd: Slurm reaches the nodes) with Slurm started on it."""
    cleanup_stale()
    tb = Testbed(len(HOSTS)).start()
    try:
        return SlurmCluster(tb).start()
    except BaseException:
        tb.close()
        raise


def _slurm_strays(tb: Testbed, where: list[str] = HOSTS) -> dict[str, list[int]]:
    """PIDs in each namespace other than the testbed's daemons (slurmd, slurmctld) and
    slurmctld's own script helper (slurmscriptd, its child, started with the first job)."""
    left = {
        h: [
            pid
            for pid in tb.pids_in(h)
            if not (cmdline(pid) == ": slurmscriptd" and _ppid(pid) in tb.daemon_pids)
        ]
        for h in where
    }
    return {h: p for h, p in left.items() if p}


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _slurm_left(tb: Testbed, where: list[str] = HOSTS) -> dict[str, list[str]]:
    return {h: [f"{p} {cmdline(p)}" for p in pids] for h, pids in _slurm_strays(tb, where).items()}


def _in_squeue(cluster: SlurmCluster, job_id: str) -> bool:
    try:
        return job_id in cluster.squeue_ids()
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return True  # no answer is no proof


def _slurm_watch(
    cluster: SlurmCluster, job_id: str, since: float, timeout: float = 60.0
) -> dict[str, Any]:
    """Seconds from `since` until the nodes hold nothing but slurmd and, checked right
    after, squeue no longer lists the job (inf: never). For the profile: when the nodes
    first held no slurmstepd, what still ran then, and when they were first empty."""
    marks: dict[str, Any] = {
        "slurmstepd first gone": float("inf"),
        "outlived slurmstepd": [],
        "nodes first empty": float("inf"),
        "verified clean": float("inf"),
    }
    while time.monotonic() - since <= timeout:
        left = _slurm_left(cluster.tb)
        now = time.monotonic() - since
        names = sorted({_what(p) for pids in left.values() for p in pids})
        if "slurmstepd" not in names and marks["slurmstepd first gone"] == float("inf"):
            marks["slurmstepd first gone"] = now
            marks["outlived slurmstepd"] = names
        if not left:
            marks["nodes first empty"] = min(marks["nodes first empty"], now)
            if not _in_squeue(cluster, job_id):
                marks["verified clean"] = time.monotonic() - since
                return marks
        time.sleep(0.02)
    return marks


def _what(described: str) -> str:
    """A short name for a process `PID cmdline`: what it is in the job."""
    cmd = described.split(" ", 1)[1] if " " in described else ""
    for needle, name in (
        ("slurmstepd", "slurmstepd"),
        ("torchrun", "torchrun agent"),
        (ENVCHECK, "worker"),
        (" - reap", "ddptui reap helper"),
    ):
        if needle in cmd:
            return name
    return Path(cmd.split(" ", 1)[0]).name if cmd.strip("? ") else "a process exiting"


def _slurm_orphans(cluster: SlurmCluster, job_id: str | None) -> list[str]:
    """What is left 10 s after the tool is done (job processes, or the job in squeue);
    then scancelled and removed (by PID) so the next run starts clean."""
    tb = cluster.tb
    where = [*HOSTS, tb.head]
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while True:
        left = [f"{h}: {p}" for h, pids in _slurm_left(tb, where).items() for p in pids]
        if job_id and _in_squeue(cluster, job_id):
            left.append(f"job {job_id} still in squeue")
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if left:
        if job_id:
            cluster.run(["scancel", job_id], check=False)
        for host in HOSTS:
            tb.restore_link(host)
        strays = [pid for pids in _slurm_strays(tb, where).values() for pid in pids]
        for pid in strays:
            _terminate(pid)
        _wait_gone(strays, [])
        cluster.wait_idle(timeout=60)
    return left


def _job_id(events: list[dict[str, Any]]) -> str | None:
    return next(
        (e["job_id"] for e in events if e["event"] == "allocation" and e.get("job_id")), None
    )


def _stamp_of(stream: TimedStream, asked: float, match: Callable[[dict[str, Any]], bool]) -> float:
    """Seconds from the request to the last event line that matches (inf: none)."""
    stamps = [
        t - asked for t, line in stream.seen if line.startswith("{") and match(json.loads(line))
    ]
    return max(stamps) if stamps else float("inf")


def slurm_ddptui_run(cluster: SlurmCluster, tmp: Path, port: int, cut: bool = False) -> Sample:
    tb = cluster.tb
    stream = TimedStream(
        ddptui_argv(
            tb,
            *headless_run_args(
                "--rdzv-port",
                str(port),
                *(["--hang-timeout", "5"] if cut else []),
                ENVCHECK,
                "--sleep",
                "300",
            ),
        ),
        env=cluster_env(cluster, tmp / "state"),
        cwd=tmp,
    )
    if stream.until(all_ranks_running(4), timeout=240) is None or any(
        e["event"] == "summary" for e in stream.events()
    ):
        stream.proc.send_signal(signal.SIGTERM)
        stream.finish()
        _slurm_orphans(cluster, _job_id(stream.events()))
        raise LaunchFailed(
            json.dumps([e for e in stream.events() if e["event"] in ("summary", "notice")][-3:])
        )
    job_id = _job_id(stream.events())
    assert job_id is not None
    cut_s = 0.0
    if cut:
        tb.cut_link("node2")
        t_cut = time.monotonic()

        def node2_hung(line: str) -> bool:
            if not line.startswith("{"):
                return False
            e: dict[str, Any] = json.loads(line)
            return bool(e["event"] == "rank" and e["node"] == "node2" and e["state"] == "hung")

        noticed = stream.until(node2_hung, timeout=120)
        cut_s = time.monotonic() - t_cut
        tb.restore_link("node2")
        if noticed is None:
            raise RuntimeError("ddptui never noticed node2 going silent")
    reports: dict[str, bool] = {}
    released: list[bool] = []

    def proven(line: str) -> bool:
        if line.startswith("{"):
            event = json.loads(line)
            if event["event"] == "teardown":
                reports[event["node"]] = bool(event["clean"])
            elif event["event"] == "allocation" and event["state"] == "released":
                released.append(True)
        return len(reports) == len(HOSTS) and bool(released)

    asked = time.monotonic()
    stream.proc.send_signal(signal.SIGTERM)
    watch = _slurm_watch(cluster, job_id, asked)
    reported = stream.until(proven, timeout=120)
    stream.finish()
    exited = time.monotonic() - asked
    orphans = _slurm_orphans(cluster, job_id)
    per_node = {
        e["node"]: f"{e['detail']} ({'clean' if e['clean'] else 'NOT clean'})"
        for e in stream.events()
        if e["event"] == "teardown"
    }
    sample: Sample = {
        "reported clean": (reported + stream.t0 - asked) if reported is not None else float("inf"),
        "verified clean": watch["verified clean"],
        "console exited": exited,
        "slurmstepd first gone": watch["slurmstepd first gone"],
        "outlived slurmstepd": watch["outlived slurmstepd"],
        "nodes first empty": watch["nodes first empty"],
        "last TeardownReport": _stamp_of(stream, asked, lambda e: e["event"] == "teardown"),
        "allocation released": _stamp_of(
            stream,
            asked,
            lambda e: e["event"] == "allocation" and e["state"] == "released",
        ),
        "reported per node": per_node,
        "ddptui says clean": all(reports.values()) and len(reports) == len(HOSTS),
        "orphans": len(orphans),
        "orphan list": orphans,
        "job": job_id,
    }
    if cut:
        sample["link cut for"] = cut_s
    return sample


def slurm_by_hand_run(cluster: SlurmCluster, tmp: Path, port: int) -> Sample:
    """sbatch the seed procedure's batch script, wait for every rank, then scancel it."""
    run_id = f"byhand{port}"
    run_dir = tmp / run_id
    (run_dir / "nodes").mkdir(parents=True)
    spec = make_spec(
        backend="slurm",
        nodes=len(HOSTS),
        nproc_per_node=2,
        script=ENVCHECK,
        script_args=("--sleep", "300"),
        rdzv_port=port,
        slurm={"mode": "sbatch"},
    )
    script = run_dir / "job.sbatch"
    script.write_text(batch_script(spec, run_id, str(run_dir), port))
    submitted = cluster.run(["sbatch", "--parsable", str(script)], cwd=tmp)
    job_id = submitted.stdout.strip().split(";")[0]
    ranks = all_envcheck_lines(4)
    deadline = time.monotonic() + 240
    while True:
        text = "".join(p.read_text(errors="replace") for p in (run_dir / "nodes").glob("*.log"))
        if any(ranks(line) for line in text.splitlines()):
            break
        if time.monotonic() > deadline or not _in_squeue(cluster, job_id):
            cluster.run(["scancel", job_id], check=False)
            _slurm_orphans(cluster, job_id)
            raise LaunchFailed(f"by hand (sbatch): {text.strip().splitlines()[-3:]}")
        time.sleep(0.1)
    asked = time.monotonic()
    cluster.run(["scancel", job_id])
    scancel_s = time.monotonic() - asked
    watch = _slurm_watch(cluster, job_id, asked)
    orphans = _slurm_orphans(cluster, job_id)
    return {
        "verified clean": watch["verified clean"],
        "scancel returned": scancel_s,
        "slurmstepd first gone": watch["slurmstepd first gone"],
        "outlived slurmstepd": watch["outlived slurmstepd"],
        "nodes first empty": watch["nodes first empty"],
        "orphans": len(orphans),
        "orphan list": orphans,
        "job": job_id,
    }


def _profile_table(report: Report, runs: dict[str, list[Sample]]) -> None:
    """Where the time goes: the intermediate marks of each run, from the request."""
    marks = (
        "scancel returned",
        "slurmstepd first gone",
        "nodes first empty",
        "last TeardownReport",
        "allocation released",
        "verified clean",
        "console exited",
    )
    table = Table(["teardown", "mark (from the request)", "median", "max"])
    for name, samples in runs.items():
        for mark in marks:
            if mark in samples[0]:
                values = [s[mark] for s in samples]
                table.add(name, mark, fmt_s(median(values)), fmt_s(max(values)))
    report.table(table)
    for name, samples in runs.items():
        seen = Counter(n for s in samples for n in s.get("outlived slurmstepd", []))
        what = ", ".join(f"{n} in {c} of {len(samples)} run(s)" for n, c in seen.most_common())
        report.para(
            f"{name}: still running on the nodes at the first check that found no slurmstepd: "
            f"{what or 'nothing'}."
        )


def _slurm_setup(cluster: SlurmCluster) -> str:
    version = cluster.run(["sinfo", "-V"], check=False).stdout.strip()
    squeue_cost = []
    for _ in range(5):
        t = time.monotonic()
        cluster.squeue_ids()
        squeue_cost.append(time.monotonic() - t)
    return (
        f"{version}, KillWait={cluster.kill_wait} s (the testbed's slurm.conf; Slurm's default "
        f"is 30), MessageTimeout=10, ProctrackType=proctrack/linuxproc (no cgroups here: a "
        f"step ends when its task's processes that slurmstepd tracks have ended; a process "
        f"that outlives the step is no longer Slurm's to kill). One `squeue` of the "
        f"independent check takes {fmt_s(median(squeue_cost))} (median of 5); the check's "
        f"clock reads after it returns."
    )


def slurm_part(report: Report, runs: int) -> None:
    port = iter(range(31000, 32000))
    cluster = open_slurm()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-teardown-slurm-") as tmp_name:
            tmp = Path(tmp_name)
            report.section(f"Slurm testbed: {runs} runs, interleaved with by hand (scancel)")
            report.para(
                "Reproduce this part alone: `python -m bench.teardown --only slurm`. "
                f"Run at {dt_now()}, load average at start "
                f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}."
            )
            report.para(SLURM_ABOUT)
            report.para(_slurm_setup(cluster))
            failures: list[str] = []
            ours, theirs = "ddptui (slurm, salloc)", "by hand (sbatch, scancel)"
            main_runs = interleaved(
                runs,
                {
                    ours: retried(lambda _: slurm_ddptui_run(cluster, tmp, next(port)), failures),
                    theirs: retried(
                        lambda _: slurm_by_hand_run(cluster, tmp, next(port)), failures
                    ),
                },
            )
            _engine_table(report, main_runs)
            _verdict(report, main_runs[ours], main_runs[theirs])
            said = sum(s["ddptui says clean"] for s in main_runs[ours])
            report.para(f"ddptui's TeardownReports said clean in {said} of {runs} runs.")
            report.para("Where the time goes (medians and worst of the same runs):")
            _profile_table(report, main_runs)
            report.para(STEP_VS_JOB)
            report.section("Slurm: a node's link cut while the job runs (cut, restore, teardown)")
            cut = interleaved(
                1,
                {
                    "ddptui (slurm), node2 cut": retried(
                        lambda _: slurm_ddptui_run(cluster, tmp, next(port), cut=True), failures
                    )
                },
            )
            sample = cut["ddptui (slurm), node2 cut"][0]
            report.para(
                "node2's bridge port down once every rank runs (slurmd, slurmstepd and the "
                "srun I/O of its step lose the head and node1; nothing is reset, packets are "
                "dropped), until ddptui marks node2's ranks hung (`--hang-timeout 5`, after "
                f"{sample['link cut for']:.1f} s), then restored and torn down at once."
            )
            _engine_table(report, cut)
            _profile_table(report, cut)
            report.section(
                "Slurm: launches that failed before every rank ran (redone, not counted)"
            )
            _failures(report, failures)
    finally:
        tb = cluster.tb
        cluster.stop()
        tb.close()


def dt_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


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
