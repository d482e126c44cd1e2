"""Provides the Slurm testbed side of the teardown benchmark: starting it, and what is left of
a job on its nodes and in squeue, watched from outside ddptui."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common.hosts import ENVCHECK, slurm_strays
from bench.teardown.runs import (
    HOSTS,
    ORPHAN_WAIT_S,
)
from testbed import SlurmCluster, Testbed, cleanup_stale
from testbed.processes import cmdline, terminate, wait_gone


def open_slurm() -> SlurmCluster:
    """A fresh 2-host testbed (no sshd: Slurm reaches the nodes) with Slurm started on it."""
    cleanup_stale()
    tb = Testbed(len(HOSTS)).start()
    try:
        return SlurmCluster(tb).start()
    except BaseException:
        tb.close()
        raise


def slurm_left(tb: Testbed, where: list[str] = HOSTS) -> dict[str, list[str]]:
    return {h: [f"{p} {cmdline(p)}" for p in pids] for h, pids in slurm_strays(tb, where).items()}


def in_squeue(cluster: SlurmCluster, job_id: str) -> bool:
    try:
        return job_id in cluster.squeue_ids()
    except (OSError, RuntimeError, subprocess.TimeoutExpired):
        return True  # no answer is no proof


def slurm_watch(
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
        left = slurm_left(cluster.tb)
        now = time.monotonic() - since
        names = sorted({what_it_is(p) for pids in left.values() for p in pids})
        if "slurmstepd" not in names and marks["slurmstepd first gone"] == float("inf"):
            marks["slurmstepd first gone"] = now
            marks["outlived slurmstepd"] = names
        if not left:
            marks["nodes first empty"] = min(marks["nodes first empty"], now)
            if not in_squeue(cluster, job_id):
                marks["verified clean"] = time.monotonic() - since
                return marks
        time.sleep(0.02)
    return marks


def what_it_is(described: str) -> str:
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


def slurm_orphans(cluster: SlurmCluster, job_id: str | None) -> list[str]:
    """What is left 10 s after the tool is done (job processes, or the job in squeue);
    then scancelled and removed (by PID) so the next run starts clean."""
    tb = cluster.tb
    where = [*HOSTS, tb.head]
    deadline = time.monotonic() + ORPHAN_WAIT_S
    while True:
        left = [f"{h}: {p}" for h, pids in slurm_left(tb, where).items() for p in pids]
        if job_id and in_squeue(cluster, job_id):
            left.append(f"job {job_id} still in squeue")
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if left:
        if job_id:
            cluster.run(["scancel", job_id], check=False)
        for host in HOSTS:
            tb.restore_link(host)
        strays = [pid for pids in slurm_strays(tb, where).values() for pid in pids]
        for pid in strays:
            terminate(pid)
        wait_gone(strays, [])
        cluster.wait_idle(timeout=60)
    return left
