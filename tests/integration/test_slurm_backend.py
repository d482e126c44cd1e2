"""The Slurm backend on a real Slurm 22.05 cluster: slurmctld in the head namespace, one
slurmd per host namespace, torchrun (or srun direct) really rendezvousing across them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from testbed import SlurmCluster
from tests.cases import TRAINER_CASES, trainer_args
from tests.integration.slurmrun import (
    NODES,
    assert_clean_teardown,
    cluster_env,
    ddptui_argv,
    finish,
    gone_from_squeue,
    job_of,
    left_on_nodes,
    node_logs,
    run,
    start,
)
from tests.integration.sshrun import TRAINER, all_running, rank_steps, read_until
from tests.procs import outputs

pytestmark = pytest.mark.integration


@TRAINER_CASES
def test_salloc_runs_each_trainer_green_then_releases(
    slurm_cluster: SlurmCluster, tmp_path: Path, script: str, args: list[str], expect: str
) -> None:
    args = trainer_args(args, tmp_path)
    result = run(slurm_cluster, tmp_path, str(TRAINER / script), *args)
    summary = result.summary
    assert result.code == 0, (summary, result.stderr[-3000:])
    assert [r["state"] for r in summary["ranks"]] == ["done"] * 4
    assert [(r["rank"], r["node"]) for r in summary["ranks"]] == [
        (0, "node1"),
        (1, "node1"),
        (2, "node2"),
        (3, "node2"),
    ]
    steps = rank_steps(result.events)
    assert sorted(steps) == [0, 1, 2, 3]
    for rank, states in steps.items():
        assert states[-3:] == ["assigned", "running", "done"], (rank, states)
    allocation = [(e["state"], e["detail"]) for e in result.of("allocation")]
    assert allocation[0][0] == "requested" and "salloc --no-shell" in allocation[0][1]
    granted = next(e for e in result.of("allocation") if e["state"] == "granted")
    assert granted["nodes"] == NODES
    assert allocation[-1] == ("released", "gone from squeue")
    # one stream per node: each node's log holds its own ranks only
    logs = node_logs(summary)
    assert list(logs) == ["000-node1.log", "001-node2.log"]
    assert "[ddptui:0:0]" in logs["000-node1.log"] and "[ddptui:2:" not in logs["000-node1.log"]
    assert "[ddptui:3:1]" in logs["001-node2.log"] and "[ddptui:0:" not in logs["001-node2.log"]
    assert "".join(logs.values()).count(expect) >= (1 if script == "cpu_ddp.py" else 4)
    assert "srun --jobid=" in (Path(summary["run_dir"]) / "commands.sh").read_text()
    assert_clean_teardown(slurm_cluster, result, granted["job_id"])


def test_srun_direct_every_rank_reports(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    result = run(slurm_cluster, tmp_path, "--launch", "srun", str(TRAINER / "envcheck.py"))
    summary = result.summary
    assert result.code == 0, (summary, result.stderr[-3000:])
    assert [(r["rank"], r["node"], r["state"]) for r in summary["ranks"]] == [
        (0, "node1", "done"),
        (1, "node1", "done"),
        (2, "node2", "done"),
        (3, "node2", "done"),
    ]
    logs = node_logs(summary)
    for rank in range(4):
        node = "node1" if rank < 2 else "node2"
        log = logs["000-node1.log" if rank < 2 else "001-node2.log"]
        assert f"host={node} local_rank={rank % 2} rank={rank} " in log, log
        assert f"rank={rank} allreduce=ok" in log
    assert "torchrun" not in (Path(summary["run_dir"]) / "commands.sh").read_text()
    assert_clean_teardown(slurm_cluster, result, job_of(result.events))


def test_rank_crash_is_reported_and_other_steps_ended(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    result = run(
        slurm_cluster, tmp_path, str(TRAINER / "envcheck.py"), "--fail-rank", "3", "--sleep", "60"
    )
    summary = result.summary
    assert result.code == 1 and summary["ok"] is False
    crashed = {r["rank"]: r for r in summary["ranks"]}[3]
    assert (crashed["node"], crashed["state"], crashed["exit_code"]) == ("node2", "failed", 1)
    assert crashed["traceback"][0].startswith("Traceback")
    assert "deliberate failure on rank 3" in crashed["error"]
    # torchrun's own "Root Cause" may name rank 2, whose all-reduce broke a moment later
    # (both error files carry the same second); the story's lead is the rank whose own
    # exception it was
    first = summary["detail"].splitlines()[0]
    assert first.startswith("crash: rank 3 on node2 — RuntimeError: envcheck: deliberate")
    assert summary["headline"] == first
    assert all(r["state"] == "failed" for r in summary["ranks"])
    assert_clean_teardown(slurm_cluster, result, job_of(result.events))


def test_teardown_mid_run_leaves_no_process_and_no_job(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(slurm_cluster, tmp_path, str(TRAINER / "envcheck.py"), "--sleep", "60")
    seen = all_running(proc)
    assert left_on_nodes(slurm_cluster.tb, timeout=0)  # the job does run there
    result = finish(proc)
    assert result.code == 1 and result.summary["ok"] is False
    assert_clean_teardown(slurm_cluster, result, job_of(seen))
    assert result.of("allocation")[-1]["state"] == "released"


GRACEFUL = """\
import os, signal, sys, time
def bye(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: torchrun may pass on the reap's too
    print(f"rank {os.environ['RANK']} got SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print(f"rank {os.environ['RANK']} up", flush=True)
time.sleep(120)
"""


def test_teardown_gives_the_workers_a_sigterm_first(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    script = tmp_path / "graceful.py"
    script.write_text(GRACEFUL)
    proc = start(slurm_cluster, tmp_path, str(script))
    seen = all_running(proc)
    result = finish(proc)
    assert_clean_teardown(slurm_cluster, result, job_of(seen))
    said = "".join(node_logs(result.summary).values())
    assert sorted(int(w) for w in re.findall(r"rank (\d+) got SIGTERM", said)) == [0, 1, 2, 3]


def test_console_killed_mid_run_loses_nothing_and_attach_tears_down(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(slurm_cluster, tmp_path, str(TRAINER / "envcheck.py"), "--sleep", "60")
    seen = all_running(proc)
    run_id = next(e["run_id"] for e in seen if e["event"] == "plan")
    proc.kill()  # no teardown at all: the steps and their logs must carry on without us
    outputs(proc, 30)
    time.sleep(2)
    job_id = job_of(seen)
    assert job_id in slurm_cluster.squeue_ids()
    attach = start(slurm_cluster, tmp_path, run_id, "--headless", "--lines", command="attach")
    attached_at = time.time()
    lines = read_until(
        attach,
        lambda e: (
            e["event"] == "summary"
            or (e["event"] == "line" and "heartbeat" in e["text"] and e["ts"] > attached_at + 1)
        ),
    )
    assert lines[-1]["event"] == "line", lines[-5:]
    assert any(e["event"] == "line" and "allreduce=ok" in e["text"] for e in lines)
    result = finish(attach)
    assert result.of("allocation")[-1]["state"] == "released"
    assert_clean_teardown(slurm_cluster, result, job_id)


def test_more_nodes_than_exist_pends_and_teardown_withdraws(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(slurm_cluster, tmp_path, "--nodes", "5", str(TRAINER / "envcheck.py"))
    seen = read_until(
        proc,
        lambda e: (
            e["event"] == "summary"
            or (e["event"] == "allocation" and e["state"] == "pending" and ":" in e["detail"])
        ),
    )
    if seen[-1]["event"] == "summary":  # Slurm may refuse at once instead of pending
        notices = [e["message"] for e in seen if e["event"] == "notice"]
        assert any("not available" in n for n in notices), notices
        return
    pending = seen[-1]
    assert pending["detail"].startswith(("PartitionNodeLimit", "PartitionConfig", "Resources"))
    job_id = pending["job_id"]
    assert job_id in slurm_cluster.squeue_ids()
    result = finish(proc, signal.SIGINT)  # Ctrl-C while pending: the operator's stop
    assert result.summary["ok"] is False and result.summary["stopped_by"] == "operator"
    assert not [e for e in result.of("notice") if e["level"] == "error"], result.of("notice")
    released = [e for e in result.of("allocation") if e["state"] == "released"]
    assert released and released[0]["job_id"] == job_id, result.events
    assert "gone from squeue" in released[0]["detail"]
    assert job_id not in slurm_cluster.squeue_ids()


def test_container_flags_srun_lacks_show_slurms_error(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    result = run(
        slurm_cluster,
        tmp_path,
        "--container-engine",
        "pyxis",
        "--container-image",
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "--container-mount",
        "/data:/data",
        str(TRAINER / "envcheck.py"),
        timeout=60,
    )
    assert result.code == 1
    errors = [e["message"] for e in result.of("notice") if e["level"] == "error"]
    assert any("unrecognized option '--container-image=nvcr.io" in m for m in errors), errors
    assert_clean_teardown(slurm_cluster, result, job_of(result.events))


# -- an allocation the operator holds -------------------------------------------------------------


def test_existing_allocation_gets_steps_and_survives(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    granted = slurm_cluster.run(["salloc", "-N2", "--no-shell"]).stderr
    job_id = granted.split("Granted job allocation ")[1].split()[0]
    try:
        result = run(slurm_cluster, tmp_path, str(TRAINER / "envcheck.py"), SLURM_JOB_ID=job_id)
        assert result.code == 0, (result.summary, result.stderr[-3000:])
        allocation = result.of("allocation")
        assert allocation[0]["state"] == "granted" and allocation[0]["job_id"] == job_id
        assert allocation[-1]["state"] == "kept"
        assert all(r["clean"] for r in result.of("teardown"))
        assert job_id in slurm_cluster.squeue_ids()
        steps = slurm_cluster.run(["squeue", "-s", "-h", "-j", job_id]).stdout
        assert "ddptui" not in steps, steps
        assert left_on_nodes(slurm_cluster.tb) == {}
    finally:
        slurm_cluster.run(["scancel", job_id])
    assert gone_from_squeue(slurm_cluster, job_id)


# -- sbatch ---------------------------------------------------------------------------------------


def test_sbatch_survives_the_console_and_attach_picks_it_up(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(
        slurm_cluster,
        tmp_path,
        "--slurm-mode",
        "sbatch",
        "--env",
        "HF_TOKEN=hf_batch-secret-value",
        "--lines",
        str(TRAINER / "envcheck.py"),
        "--sleep",
        "30",
    )
    seen = all_running(proc)
    script = next(
        e["message"] for e in seen if e["event"] == "notice" and "#SBATCH" in e["message"]
    )
    job_id = job_of(seen)
    detached = finish(proc, signal.SIGUSR1)  # the console goes; the job must not
    assert detached.code == 0 and detached.summary["detached"] is True
    run_dir = Path(detached.summary["run_dir"])
    saved = (run_dir / "job.sbatch").read_text()
    assert saved in script
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST"' in saved
    assert "bash -c run_node" in saved and "torchrun --nnodes=2" in saved
    # The secret is sourced from a private file, never written in the script or shown.
    assert "hf_batch-secret-value" not in saved and "hf_batch-secret-value" not in script
    secret = run_dir / "secret.env"
    assert secret.read_text() == "export HF_TOKEN=hf_batch-secret-value\n"
    assert secret.stat().st_mode & 0o777 == 0o600
    time.sleep(2)
    assert job_id in slurm_cluster.squeue_ids()
    assert all(slurm_cluster.tb.describe_pids(n) for n in NODES)

    attach = start(slurm_cluster, tmp_path, job_id, "--headless", "--lines", command="attach")
    attached_at = time.time()
    lines = read_until(
        attach,
        lambda e: (
            e["event"] == "summary"
            or (e["event"] == "line" and "heartbeat" in e["text"] and e["ts"] > attached_at + 1)
        ),
    )
    texts = [e["text"] for e in lines if e["event"] == "line"]
    assert any(t.startswith("envcheck host=node1") for t in texts)  # from the log: replayed
    assert lines[-1]["event"] == "line"  # and a live line, printed after attaching
    result = finish(attach)
    assert any(e["state"] == "released" for e in result.of("allocation"))
    assert_clean_teardown(slurm_cluster, result, job_id)


def test_attach_names_an_unknown_job_clearly(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    proc = subprocess.run(
        ddptui_argv(slurm_cluster.tb, "attach", "99999", "--headless"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=cluster_env(slurm_cluster, tmp_path / "state"),
    )
    assert proc.returncode == 2
    assert "no run used Slurm job 99999" in proc.stderr


@pytest.fixture(autouse=True)
def _nothing_left(slurm_cluster: SlurmCluster) -> Any:
    """Every test starts and ends with an empty queue; a leftover is scancelled (and fails)."""
    yield
    left = slurm_cluster.squeue_ids()
    if left:
        slurm_cluster.run(["scancel", *left])
    assert not left, f"jobs left in squeue: {left}"
    assert os.environ.get("SLURM_JOB_ID") is None
