"""Provides the Slurm part of the teardown benchmark (bench/teardown/teardown.py): a real Slurm
testbed, ddptui's Slurm backend vs the sbatch script torn down with scancel."""

from __future__ import annotations

import json
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common.hosts import (
    ENVCHECK,
    TimedStream,
    all_envcheck_lines,
    all_ranks_running,
)
from bench.common.report import Report, Table, fmt_s, load_average
from bench.common.stats import interleaved, median
from bench.teardown.runs import (
    HOSTS,
    LaunchFailed,
    Sample,
    engine_table,
    failures_para,
    retried,
    verdict_para,
)
from bench.teardown.slurm_watch import in_squeue, open_slurm, slurm_orphans, slurm_watch
from ddptui.core.backends.slurm.batch_script import batch_script
from ddptui.core.job.spec import make_spec
from testbed import SlurmCluster
from testbed.slurm_ddptui import cluster_env, ddptui_argv, headless_run_args

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


def dt_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


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
        slurm_orphans(cluster, _job_id(stream.events()))
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
    watch = slurm_watch(cluster, job_id, asked)
    reported = stream.until(proven, timeout=120)
    stream.finish()
    exited = time.monotonic() - asked
    orphans = slurm_orphans(cluster, job_id)
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
        if time.monotonic() > deadline or not in_squeue(cluster, job_id):
            cluster.run(["scancel", job_id], check=False)
            slurm_orphans(cluster, job_id)
            raise LaunchFailed(f"by hand (sbatch): {text.strip().splitlines()[-3:]}")
        time.sleep(0.1)
    asked = time.monotonic()
    cluster.run(["scancel", job_id])
    scancel_s = time.monotonic() - asked
    watch = slurm_watch(cluster, job_id, asked)
    orphans = slurm_orphans(cluster, job_id)
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
                "Reproduce this part alone: `python -m bench.teardown.teardown --only slurm`. "
                f"Run at {dt_now()}, load average at start "
                f"{load_average()}."
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
            engine_table(report, main_runs)
            verdict_para(report, main_runs[ours], main_runs[theirs])
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
            engine_table(report, cut)
            _profile_table(report, cut)
            report.section(
                "Slurm: launches that failed before every rank ran (redone, not counted)"
            )
            failures_para(report, failures)
    finally:
        tb = cluster.tb
        cluster.stop()
        tb.close()
