"""`ddptui preflight` on a real Slurm 22.05 cluster (slurmctld in the head namespace, a slurmd
per host): nodes from `salloc --no-shell`, checks through `srun --jobid --overlap -w NODE`, the
allocation released afterwards; one node at a time made to fail a check for real."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import SlurmCluster
from tests.cases import ROOT
from tests.integration.sshrun import TRAINER
from tests.integration.test_preflight_ssh import (
    CHECKS,
    SQUAT,
    Preflight,
    edited,
    host_lines_to,
    stub_torch_venv,
)

pytestmark = pytest.mark.integration
NODES = ["node1", "node2", "node3"]


def preflight(cluster: SlurmCluster, tmp: Path, *args: str) -> Preflight:
    env = {k: v for k, v in cluster.env.items() if not k.startswith("SLURM_JOB")}
    env.update(DDPTUI_STATE_DIR=str(tmp / "state"), PYTHONPATH=str(ROOT))
    argv = [
        sys.executable,
        "-m",
        "ddptui.cli",
        "preflight",
        "--headless",
        "--backend",
        "slurm",
    ]
    argv += ["--nodes", "3", "--nproc-per-node", "1", *args, str(TRAINER / "envcheck.py")]
    proc = subprocess.run(
        cluster.tb.ns_argv(cluster.tb.head, argv),
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp,
        env=env,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return Preflight(proc.returncode, events, proc.stderr)


def allocations(run: Preflight) -> list[dict[str, Any]]:
    return [e for e in run.events if e["event"] == "allocation"]


def released(cluster: SlurmCluster, run: Preflight) -> bool:
    """The allocation made for the check is gone from squeue (polled: scancel takes a moment)."""
    jobs = {e["job_id"] for e in allocations(run) if e.get("job_id")}
    deadline = time.monotonic() + 60
    while jobs & set(cluster.squeue_ids()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return bool(jobs)


def test_a_healthy_slurm_cluster_passes_and_the_allocation_is_released(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    run = preflight(slurm_cluster, tmp_path)
    assert run.code == 0, run
    assert set(run.checks) == {(n, c) for n in NODES for c in CHECKS}
    assert {e["status"] for e in run.checks.values()} == {"ok"}, run
    states = [e["state"] for e in allocations(run)]
    assert states[0] == "requested" and "released" in states, states
    tb = slurm_cluster.tb
    assert run.checks[("node2", "reachable")]["detail"] == f"node2 at {tb.host_ip('node2')}"
    head = f"node1 ({tb.host_ip('node1')}:29400)"
    assert run.checks[("node3", "rdzv-port")]["detail"].startswith(f"reached {head}")
    assert run.checks[("node1", "disk")]["detail"].endswith(f"free in {tmp_path}")
    assert released(slurm_cluster, run)


def test_hostname_on_loopback_under_slurm(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    hosts_file = slurm_cluster.tb.hosts_file("node2")  # slurmd bind-mounted it as /etc/hosts
    with edited(hosts_file, lambda t: host_lines_to(t, "node2", "127.0.1.1")):
        run = preflight(slurm_cluster, tmp_path)
    assert run.code == 1, run
    assert run.failed() == {("node2", "hostname")}, run
    assert "resolves to 127.0.1.1 (loopback)" in run.checks[("node2", "hostname")]["detail"]
    assert released(slurm_cluster, run)


@contextlib.contextmanager
def squatting(cluster: SlurmCluster, host: str) -> Iterator[None]:
    squatter = cluster.tb.exec(host, [sys.executable, "-c", SQUAT])
    try:
        deadline = time.monotonic() + 30
        while "29400" not in cluster.tb.run(host, ["ss", "-ltn"]).stdout:
            assert time.monotonic() < deadline, "the squatter did not listen"
            time.sleep(0.1)
        yield
    finally:
        squatter.kill()
        squatter.wait(30)


def test_a_squatted_port_under_slurm(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    with squatting(slurm_cluster, "node1"):
        run = preflight(slurm_cluster, tmp_path)
    assert run.code == 1, run
    assert run.failed() == {("node1", "rdzv-port")}, run
    assert "Address already in use" in run.checks[("node1", "rdzv-port")]["detail"]
    assert released(slurm_cluster, run)


def test_another_torch_on_one_slurm_node(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """node2's environment is another venv (a real second installation with torch 1.13.1),
    selected by the job's own activation step as a per-node conda env would be."""
    venv_bin = stub_torch_venv(tmp_path / "old-torch", "1.13.1")
    activate = f'if [ "$(hostname)" = node2 ]; then . {venv_bin}/activate; fi'
    run = preflight(slurm_cluster, tmp_path, "--activate", activate)
    assert run.code == 1, run
    assert run.failed() == {("node2", "torch")}, run
    detail = run.checks[("node2", "torch")]["detail"]
    assert detail.startswith("torch 1.13.1 (") and "old-torch" in detail
    assert run.status("node2", "python") == "ok"
    assert released(slurm_cluster, run)
