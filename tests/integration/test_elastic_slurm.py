"""Elastic jobs within one Slurm allocation: `--nodes 2:3` on the Slurm testbed's three
slurmd hosts with real torchrun; a node's agent killed mid-run through headless mode's control
file (SIGUSR2), the job going on at two nodes inside the same allocation, the restart cycle
told with its cause and members, and all three nodes proven clean, the allocation gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import SlurmCluster
from tests.integration.elastic_run import ELASTIC_JOB, kill_once_stepping, last_cycles
from tests.integration.slurmrun import gone_from_squeue, job_of, left_on_nodes, start

pytestmark = pytest.mark.integration

HOSTS = ["node1", "node2", "node3"]


def test_a_killed_node_leaves_an_elastic_job_running_on_two_in_its_allocation(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(slurm_cluster, tmp_path, "--nodes", "2:3", *ELASTIC_JOB)
    events = kill_once_stepping(proc, tmp_path / "state", "node3", 3)
    summary = events[-1]
    job_id = job_of(events)

    allocations = {e["job_id"] for e in events if e["event"] == "allocation" and e["job_id"]}
    assert allocations == {job_id}  # one allocation throughout
    lost = [e for e in events if e["event"] == "membership"]
    assert [(e["node"], e["change"]) for e in lost] == [("node3", "killed")], lost
    cycles = last_cycles(events)
    assert sorted(cycles) == [0, 1], cycles
    assert sorted(m["node"] for m in cycles[0]["members"]) == HOSTS
    second = cycles[1]
    assert sorted(m["node"] for m in second["members"]) == ["node1", "node2"]
    assert second["world_size"] == 2 and second["failed_node"] == "node3"
    final = {c["index"]: c for c in summary["cycles"]}
    assert final[1]["step_reached"] == 16  # the two went on to the end
    assert summary["ok"] is True and proc.returncode == 0, summary["detail"]
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert left_on_nodes(slurm_cluster.tb, HOSTS) == {}
    assert gone_from_squeue(slurm_cluster, job_id), slurm_cluster.squeue_ids()
