"""A node's torchrun agent killed alone inside a Slurm allocation (the Slurm testbed's three
slurmd hosts, real torchrun): its orphaned worker stopped, the story blaming that node, an
elastic job shrinking and going on inside the same allocation, a fixed one stopping, nothing
left on any node and the allocation gone. docs/failures.md has the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed import SlurmCluster
from tests.integration.elastic_run import ELASTIC_JOB, last_cycles
from tests.integration.slurmrun import gone_from_squeue, job_of, left_on_nodes, start
from tests.integration.test_failure_matrix_local import (
    ENDS_WITHIN_S,
    _barrier_waits,
    _story_line,
    _until_stepping,
)
from tests.integration.test_failure_matrix_ssh import agent_killed
from tests.procs import outputs

pytestmark = pytest.mark.integration

HOSTS = ["node1", "node2", "node3"]
VICTIM = "node3"


@pytest.mark.parametrize(("nodes", "ok"), [("2:3", True), ("3", False)])
def test_an_agent_killed_alone(
    slurm_cluster: SlurmCluster, tmp_path: Path, nodes: str, ok: bool
) -> None:
    proc = start(slurm_cluster, tmp_path, "--nodes", nodes, "--max-restarts", "3", *ELASTIC_JOB)
    events = _until_stepping(proc, 3)
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    agent_killed(slurm_cluster.tb, run_id)
    out, err = outputs(proc, ENDS_WITHIN_S)
    events += [json.loads(line) for line in out.splitlines()]
    summary = events[-1]
    assert summary["event"] == "summary", (events[-5:], err[-3000:])

    assert summary["ok"] is ok and proc.returncode == (0 if ok else 1), summary["detail"]
    told = _story_line(summary)
    assert told.startswith(f"agent lost: node {VICTIM}"), summary["detail"]
    if ok:
        last = last_cycles(events)
        assert sorted(m["node"] for m in last[max(last)]["members"]) == ["node1", "node2"]
    assert all(wait < 30 for wait in _barrier_waits(summary)), _barrier_waits(summary)
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert left_on_nodes(slurm_cluster.tb, HOSTS) == {}
    assert gone_from_squeue(slurm_cluster, job_of(events)), slurm_cluster.squeue_ids()
