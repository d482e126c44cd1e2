"""Runs the real `ddptui` CLI against the Slurm test cluster from its head namespace."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from testbed import SlurmCluster, Testbed
from testbed.slurm_ddptui import cluster_env, ddptui_argv, headless_run_args
from tests.integration.sshrun import HeadlessRun
from tests.procs import outputs

pytestmark = pytest.mark.integration

NODES = ["node1", "node2"]


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def run(
    cluster: SlurmCluster, tmp: Path, *args: str, timeout: float = 240, **env: str
) -> HeadlessRun:
    proc = subprocess.run(
        ddptui_argv(cluster.tb, *headless_run_args(*args)),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp,
        env=cluster_env(cluster, tmp / "state", **env),
    )
    return HeadlessRun(proc.returncode, _events(proc.stdout), proc.stderr)


def start(
    cluster: SlurmCluster, tmp: Path, *args: str, command: str = "run", **env: str
) -> subprocess.Popen[str]:
    argv = headless_run_args(*args) if command == "run" else [command, *args]
    return subprocess.Popen(
        ddptui_argv(cluster.tb, *argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp,
        env=cluster_env(cluster, tmp / "state", **env),
    )


def finish(proc: subprocess.Popen[str], sig: int | None = signal.SIGTERM) -> HeadlessRun:
    if sig is not None:
        proc.send_signal(sig)
    out, err = outputs(proc, 180)
    return HeadlessRun(proc.returncode, _events(out), err)


def job_of(events: list[dict[str, Any]]) -> str:
    return str(next(e["job_id"] for e in events if e["event"] == "allocation" and e["job_id"]))


def left_on_nodes(tb: Testbed, hosts: list[str] = NODES, timeout: float = 15) -> dict:
    """Processes (other than the harness's sshd and slurmd) still living on each host."""
    deadline = time.monotonic() + timeout
    while True:
        left = {h: tb.describe_pids(h) for h in hosts}
        left = {h: p for h, p in left.items() if p}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def gone_from_squeue(cluster: SlurmCluster, job_id: str, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while job_id in cluster.squeue_ids():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def node_logs(summary: dict[str, Any]) -> dict[str, str]:
    logs = sorted((Path(summary["run_dir"]) / "nodes").glob("*.log"))
    return {p.name: p.read_text() for p in logs}


def assert_clean_teardown(cluster: SlurmCluster, result: HeadlessRun, job_id: str) -> None:
    reports = result.of("teardown")
    assert sorted(r["node"] for r in reports) == NODES, reports
    assert all(r["clean"] for r in reports), reports
    assert left_on_nodes(cluster.tb) == {}
    assert gone_from_squeue(cluster, job_id), cluster.squeue_ids()


# -- salloc ---------------------------------------------------------------------------------------
