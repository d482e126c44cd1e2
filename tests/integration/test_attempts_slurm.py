"""Attempts on the Slurm testbed: a batch job requeued once (`scontrol requeue`) is one run with
two attempts in `ddptui history` and its JSON, followed by the console that launched it, and by
`ddptui attach` when the requeue came while no console watched."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from testbed.slurm import SlurmCluster
from tests.cases import ROOT
from tests.integration.slurmrun import assert_clean_teardown, finish, job_of, start
from tests.integration.sshrun import all_running, read_until
from tests.procs import outputs

pytestmark = pytest.mark.integration

WORKER = ROOT / "tests" / "data" / "graceful" / "worker.py"
BATCH = ("--slurm-mode", "sbatch", "--nproc-per-node", "1", "--slurm-arg=--requeue")


def _history(cluster: SlurmCluster, tmp: Path) -> tuple[list[dict[str, Any]], str]:
    """`ddptui history --json` (its rows) and `ddptui history --wide` (its text)."""
    rows = finish(start(cluster, tmp, "--json", command="history"), None)
    assert rows.code == 0, rows.stderr
    text = start(cluster, tmp, "--wide", command="history")
    out, _err = outputs(text, 60)
    return rows.events, out


def _new_cycle_steps(proc: Any) -> list[dict[str, Any]]:
    """Events until the requeued job's workers print their second step again."""
    return read_until(
        proc,
        lambda e: e["event"] == "line" and "graceful rank=" in e["text"] and "step=2" in e["text"],
    )


def _assert_one_run_two_attempts(
    cluster: SlurmCluster, tmp: Path, run_id: str, job_id: str
) -> None:
    rows, text = _history(cluster, tmp)
    assert [r["id"] for r in rows] == [run_id], rows
    (row,) = rows
    assert row["slurm_job"] == job_id and row["status"] == "torn down"
    first, second = row["attempts"]
    assert (first["index"], first["cause"], first["outcome"]) == (1, "launch", "requeued")
    assert (second["index"], second["cause"], second["requeue"]) == (2, "requeue", 1)
    assert second["outcome"] == "torn down" and second["run_id"] == run_id
    assert first["started"] < first["ended"] <= second["started"] < second["ended"]
    assert second["why"] == f"Slurm requeued job {job_id} (restart 1)"
    assert f"{run_id}: 2 attempts" in text, text
    first_line = next(line for line in text.splitlines() if line.startswith("  #1 launch  "))
    assert first_line.endswith(f"requeued: Slurm requeued job {job_id} (restart 1)"), text
    assert "\n  #2 requeue  " in text and "torn down" in text.split("  #2 requeue  ")[1], text


def test_a_requeued_batch_job_is_one_run_with_two_attempts(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(
        slurm_cluster,
        tmp_path,
        *BATCH,
        "--lines",
        *(str(WORKER), "--ckpt-dir", str(tmp_path / "ckpt"), "--handler-s", "1"),
    )
    seen = all_running(proc, world=2)
    job_id = job_of(seen)
    run_id = next(e["run_id"] for e in seen if e["event"] == "plan")

    slurm_cluster.run(["scontrol", "requeue", job_id])
    told = read_until(proc, lambda e: e["event"] == "attempt" and e["attempt"]["index"] == 2)
    began = told[-1]
    assert began["attempt"]["cause"] == "requeue" and began["previous"]["outcome"] == "requeued"
    again = _new_cycle_steps(proc)  # the console followed the job into its second attempt

    result = finish(proc)
    assert_clean_teardown(slurm_cluster, result, job_id)
    attempts = [e for e in told + result.events if e["event"] == "attempt"]
    assert {e["attempt"]["index"] for e in attempts} == {2}  # no restart of torchrun's besides
    # one story across both: the second attempt's round is told as the requeue it is
    incidents = [e for e in seen + told + again + result.events if e["event"] == "incident"]
    restarts = {e["number"]: e for e in incidents if e["kind"] == "restarted"}
    assert [e["summary"] for e in restarts.values()] == [
        f"Slurm requeued job {job_id} (restart 1)"
    ], incidents
    _assert_one_run_two_attempts(slurm_cluster, tmp_path, run_id, job_id)


def test_attach_follows_a_job_requeued_while_detached_into_its_next_attempt(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    args = (str(WORKER), "--ckpt-dir", str(tmp_path / "ckpt"), "--handler-s", "1")
    launched = start(slurm_cluster, tmp_path, *BATCH, *args)
    seen = all_running(launched, world=2)
    job_id = job_of(seen)
    launched.send_signal(signal.SIGUSR1)  # the operator detaches: the job runs on
    left = read_until(launched, lambda e: e["event"] == "summary")
    assert left[-1]["event"] == "summary" and left[-1]["detached"] is True, left[-5:]
    run_id = left[-1]["run_id"]
    assert finish(launched, None).code == 0

    slurm_cluster.run(["scontrol", "requeue", job_id])
    proc = start(slurm_cluster, tmp_path, run_id, "--headless", "--lines", command="attach")
    told = read_until(proc, lambda e: e["event"] == "attempt")
    assert told[-1]["event"] == "attempt", told[-5:]
    assert told[-1]["attempt"]["cause"] == "requeue" and told[-1]["attempt"]["index"] == 2
    again = _new_cycle_steps(proc)
    texts = [e["text"] for e in told + again if e["event"] == "line"]
    assert any(f"job {job_id} requeued (restart 1): a new cycle" in t for t in texts), texts[-20:]

    result = finish(proc)
    assert_clean_teardown(slurm_cluster, result, job_id)
    _assert_one_run_two_attempts(slurm_cluster, tmp_path, run_id, job_id)
    # attaching again reads the logs from their start: the attempts stay two
    rows, _text = _history(slurm_cluster, tmp_path)
    assert json.dumps(rows[0]["attempts"]).count('"cause": "requeue"') == 1
