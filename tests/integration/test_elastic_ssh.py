"""Elastic jobs on real hosts: `--nodes 2:3` on three sshd namespaces with real torchrun; a
node's agent killed mid-run through headless mode's control file (SIGUSR2), the job going
on at two nodes, the restart cycle told with its cause and members, and all three hosts
proven clean; with a spare host, the lost node replaced."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from testbed.netns import Testbed
from tests.integration.elastic_run import ELASTIC_JOB, kill_once_stepping, last_cycles
from tests.integration.sshrun import popen_headless

HOSTS = ["node1", "node2", "node3"]


def _run_with_a_kill(
    tb: Testbed, tmp_path: Path, nodes: str, victim: str, *extra: str
) -> tuple[subprocess.Popen[str], list[dict[str, Any]]]:
    """Start the job, kill `victim`'s agent once every rank runs, read to the summary."""
    state = tmp_path / "state"
    args = ("--hosts", "node[1-3]", "--nodes", nodes, *extra, *ELASTIC_JOB)
    proc = popen_headless(tb, state, *args)
    return proc, kill_once_stepping(proc, state, victim, int(nodes.split(":")[-1]))


def test_a_killed_node_leaves_an_elastic_job_running_on_two(
    testbed: Testbed, tmp_path: Path
) -> None:
    proc, events = _run_with_a_kill(testbed, tmp_path, "2:3", "node3")
    summary = events[-1]
    plan = next(e for e in events if e["event"] == "plan")
    lines = [line for _, line in plan["commands"]]
    assert all("--nnodes=2:3" in line and "--max-restarts=3" in line for line in lines)
    assert "is_host=true" in lines[0] and all("is_host=false" in line for line in lines[1:])
    assert all("last_call_timeout=2" in line for line in lines)
    lost = [e for e in events if e["event"] == "membership"]
    assert [(e["node"], e["change"]) for e in lost] == [("node3", "killed")]
    assert sorted(lost[0]["nodes"]) == ["node1", "node2"]
    cycles = last_cycles(events)
    assert sorted(cycles) == [0, 1], cycles
    assert sorted(cycles[0]["members"][i]["node"] for i in range(3)) == HOSTS
    second = cycles[1]
    assert sorted(m["node"] for m in second["members"]) == ["node1", "node2"]
    assert second["world_size"] == 2 and second["failed_node"] == "node3"
    assert second["cause"] == "node node3 agent killed by the operator (fault injection)"
    assert second["step_before"] is not None and second["step_before"] >= 2
    final = {c["index"]: c for c in summary["cycles"]}  # the rounds as they ended
    assert final[1]["step_reached"] == 16  # the two went on to the end
    assert summary["ok"] is True and proc.returncode == 0, summary["detail"]
    assert "after 1 restart cycle" in summary["detail"]
    assert [c["index"] for c in summary["cycles"]] == [0, 1]
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert testbed.wait_clean(HOSTS) == {}


def test_a_spare_host_replaces_the_lost_node(testbed: Testbed, tmp_path: Path) -> None:
    """--nodes 2 --spares 1 on three hosts: node3 waits; node2 killed; node1's agent waits
    for a second node, and node3 joins it (its first rendezvous is the job's second round:
    torch's shared store would never give it the round's MASTER_ADDR, so ddptui opts out)."""
    proc, events = _run_with_a_kill(
        testbed, tmp_path, "2", "node2", "--spares", "1", "--max-restarts", "3"
    )
    summary = events[-1]
    changes = [(e["node"], e["change"]) for e in events if e["event"] == "membership"]
    assert changes == [("node2", "killed"), ("node3", "joined")], changes
    cycles = last_cycles(events)
    last = cycles[max(cycles)]
    assert sorted(m["node"] for m in last["members"]) == ["node1", "node3"], cycles
    assert last["world_size"] == 2
    assert summary["ok"] is True and proc.returncode == 0, summary["detail"]
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert testbed.wait_clean(HOSTS) == {}
