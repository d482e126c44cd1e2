"""Elastic jobs within one Slurm allocation: `--nodes 2:3` on the Slurm testbed's three
slurmd hosts with real torchrun; a node's agent killed mid-run through headless mode's control
file (SIGUSR2), the job going on at two nodes inside the same allocation, the restart cycle
told with its cause and members, and all three nodes proven clean, the allocation gone."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from testbed import SlurmCluster
from tests.integration.slurmrun import gone_from_squeue, job_of, left_on_nodes, start
from tests.integration.sshrun import TRAINER, read_until

pytestmark = pytest.mark.integration

HOSTS = ["node1", "node2", "node3"]


def test_a_killed_node_leaves_an_elastic_job_running_on_two_in_its_allocation(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(
        slurm_cluster,
        tmp_path,
        "--nodes",
        "2:3",
        "--nproc-per-node",
        "1",
        "--rdzv-conf",
        "last_call_timeout=2",  # c10d waits 30 s for more nodes once MIN joined: short here
        "--hang-timeout",
        "0",
        "--lines",
        str(TRAINER / "elastic_ddp.py"),
        "--steps",
        "16",
        "--step-time",
        "0.5",
    )
    stepped: set[int] = set()

    def all_stepping(e: dict[str, Any]) -> bool:
        if e["event"] == "line" and e["rank"] is not None and " step=2 " in e["text"]:
            stepped.add(e["rank"])
        return len(stepped) == 3 or e["event"] == "summary"

    events = read_until(proc, all_stepping)
    assert len(stepped) == 3, (events[-5:], proc.stderr and proc.stderr.read())
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    job_id = job_of(events)
    (tmp_path / "state" / "runs" / run_id / "control").write_text("kill node3\n")
    proc.send_signal(signal.SIGUSR2)
    out, err = proc.communicate(timeout=400)
    events += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    summary = events[-1]
    assert summary["event"] == "summary", (events[-5:], err[-3000:])

    allocations = {e["job_id"] for e in events if e["event"] == "allocation" and e["job_id"]}
    assert allocations == {job_id}  # one allocation throughout
    lost = [e for e in events if e["event"] == "membership"]
    assert [(e["node"], e["change"]) for e in lost] == [("node3", "killed")], lost
    cycles: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["event"] == "cycle":
            cycles[e["cycle"]["index"]] = e["cycle"]
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
