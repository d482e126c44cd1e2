"""Preemption on the Slurm testbed: Slurm's own warning (`--slurm-signal`) reaches every
worker, whose handler checkpoints before the end; a time limit is reported as such; a
requeued batch job is followed under its same id; the operator's stop signal (USR1) reaches
every worker through the batch job's steps, the agents left to end on their own."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from testbed.slurm import SlurmCluster
from tests.cases import ROOT
from tests.integration.slurmrun import (
    NODES,
    assert_clean_teardown,
    finish,
    job_of,
    start,
)
from tests.integration.sshrun import all_running, read_until

pytestmark = pytest.mark.integration

WORKER = ROOT / "tests" / "data" / "graceful" / "worker.py"


def _ckpts(out: Path) -> dict[int, list[str]]:
    return {r: (out / f"rank{r}.ckpt").read_text().split() for r in (0, 1)}


def test_slurm_signal_reaches_the_workers_before_the_time_limit_ends_the_job(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    out = tmp_path / "ckpt"
    proc = start(
        slurm_cluster,
        tmp_path,
        *("--slurm-mode", "sbatch", "--nproc-per-node", "1", "--time", "2"),
        *("--slurm-signal", "B:USR1@60"),
        *(str(WORKER), "--ckpt-dir", str(out), "--handler-s", "2", "--stop-on", "USR1"),
        "--after",
        "continue",
    )
    seen = all_running(proc, world=2)
    script = next(
        e["message"] for e in seen if e["event"] == "notice" and "#SBATCH" in e["message"]
    )
    assert "#SBATCH --signal=B:USR1@60" in script
    # Slurm checks time limits every 30 s or so: the warning comes 60-90 s in, the end at
    # 2-2.5 min (a warning due earlier may come before a loaded machine's workers are up)
    result = finish(proc, None)
    ended = time.time()

    # each worker's handler ran on Slurm's USR1, passed on by the batch shell to every
    # process of the job's steps (the agents ignored it), and wrote its checkpoint well
    # before the job ended
    for rank, (name, _) in _ckpts(out).items():
        assert name == "SIGUSR1", rank
        assert (out / f"rank{rank}.ckpt").stat().st_mtime < ended - 5
    summary = result.summary
    assert summary["ok"] is False
    first = summary["detail"].splitlines()[0]  # the story's lead: the scheduler's end
    said = "ended by the scheduler — the job reached its Slurm time limit"
    assert first.startswith(said) and summary["headline"] == first, summary
    assert "DUE TO TIME LIMIT" in summary["detail"], summary
    # the verdict is the scheduler's, and no rank it stopped is the culprit
    assert summary["verdict"]["signature"] == "slurm_time_limit", summary["verdict"]
    assert summary["verdict"]["rank"] is None
    assert not any(r["culprit"] for r in summary["ranks"]), summary["ranks"]
    assert not slurm_cluster.squeue_ids()


def test_a_requeued_batch_job_is_followed_then_stopped_with_usr1(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    out = tmp_path / "ckpt"
    proc = start(
        slurm_cluster,
        tmp_path,
        *("--slurm-mode", "sbatch", "--nproc-per-node", "1", "--slurm-arg=--requeue"),
        *("--stop-signal", "USR1", "--grace", "30", "--lines"),
        *(str(WORKER), "--ckpt-dir", str(out), "--handler-s", "3", "--stop-on", "USR1"),
    )
    seen = all_running(proc, world=2)
    job_id = job_of(seen)
    script = next(
        e["message"] for e in seen if e["event"] == "notice" and "#SBATCH" in e["message"]
    )
    assert "trap '' USR1 USR2" in script

    slurm_cluster.run(["scontrol", "requeue", job_id])
    requeued = read_until(proc, lambda e: e["event"] == "allocation" and e["state"] == "requeued")
    assert requeued[-1]["job_id"] == job_id and "requeue 1" in requeued[-1]["detail"]
    # the new cycle: the script says so in each node's log, and the ranks run again
    again = read_until(
        proc,
        lambda e: e["event"] == "line" and "graceful rank=" in e["text"] and "step=2" in e["text"],
    )
    texts = [e["text"] for e in requeued + again if e["event"] == "line"]
    assert any(f"job {job_id} requeued (restart 1): a new cycle" in t for t in texts), texts[-20:]
    assert not (out / "rank0.ckpt").exists()  # a requeue is no stop of ours

    result = finish(proc)  # the operator's stop: USR1 to every worker, 30 s of grace
    for rank, (name, _) in _ckpts(out).items():
        assert name == "SIGUSR1", rank
    assert_clean_teardown(slurm_cluster, result, job_id)
    reports = result.of("teardown")
    assert sorted(r["node"] for r in reports) == NODES
