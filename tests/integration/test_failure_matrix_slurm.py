"""A node's torchrun agent killed alone inside a Slurm allocation (the Slurm testbed's three
slurmd hosts, real torchrun): its orphaned worker stopped, the story blaming that node, an
elastic job shrinking and going on inside the same allocation, a fixed one stopping, nothing
left on any node and the allocation gone. A worker killed alone (as the OOM killer ends one):
its agent restarts the group inside the same step and the job finishes. docs/failures.md
has the table."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed import SlurmCluster, Testbed
from tests.integration.elastic_run import ELASTIC_JOB, last_cycles
from tests.integration.slurmrun import gone_from_squeue, job_of, left_on_nodes, start
from tests.integration.test_failure_matrix_local import (
    ENDS_WITHIN_S,
    NEVER_JOINS_JOB,
    _barrier_waits,
    _story_line,
    _until_stepping,
    named_slow,
    never_joins,
)
from tests.integration.test_failure_matrix_ssh import (
    _victim_pids,
    agent_killed,
    helper_killed,
    worker_killed,
)
from tests.procs import outputs, pids_with_tag

pytestmark = pytest.mark.integration

HOSTS = ["node1", "node2", "node3"]
VICTIM = "node3"


MODES = {
    "agent_killed_elastic": ("2:3", agent_killed, f"agent lost: node {VICTIM}", True),
    "agent_killed_fixed": ("3", agent_killed, f"agent lost: node {VICTIM}", False),
    "worker_killed_fixed": ("3", worker_killed, "restarted: rank ", True),
    # the step's task on that node, which started the agent and waits for it
    "helper_killed": ("3", helper_killed, "", True),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_a_node_dies(slurm_cluster: SlurmCluster, tmp_path: Path, mode: str) -> None:
    nodes, hurt, headline, ok = MODES[mode]
    proc = start(slurm_cluster, tmp_path, "--nodes", nodes, "--max-restarts", "3", *ELASTIC_JOB)
    events = _until_stepping(proc, 3)
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    hurt(slurm_cluster.tb, run_id)
    out, err = outputs(proc, ENDS_WITHIN_S)
    events += [json.loads(line) for line in out.splitlines()]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = events[-1]
    assert summary["event"] == "summary", (events[-5:], err[-3000:])

    assert summary["ok"] is ok and proc.returncode == (0 if ok else 1), summary["detail"]
    if headline:
        assert _story_line(summary).startswith(headline), summary["detail"]
    else:  # the run was healthy: nothing to tell
        assert not summary["incidents"] and not summary["headline"], summary["detail"]
    survivors = {r["rank"] for r in summary["ranks"] if r["node"] != VICTIM}
    blamed = {r for i in summary["incidents"] if i["round"] == 0 for r in i["blamed"]}
    assert not blamed & survivors, summary["incidents"]  # a survivor is never the culprit
    if nodes == "2:3":
        last = last_cycles(events)
        assert sorted(m["node"] for m in last[max(last)]["members"]) == ["node1", "node2"]
    assert all(wait < 30 for wait in _barrier_waits(summary)), _barrier_waits(summary)
    assert not named_slow(events)
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert left_on_nodes(slurm_cluster.tb, HOSTS) == {}
    assert gone_from_squeue(slurm_cluster, job_of(events)), slurm_cluster.squeue_ids()


# Slurm's own word on a lost host comes after SlurmdTimeout (300 s by default): a cluster of
# this test's own answers within the test's time (slurmctld pings every third of it).
SLURMD_TIMEOUT_S = 12


@pytest.fixture
def quick_to_notice(make_testbed: Callable[..., Testbed]) -> Iterator[SlurmCluster]:
    """Slurm on three hosts of this test's own, telling a node that stops answering down
    after SLURMD_TIMEOUT_S."""
    tb = make_testbed(HOSTS, sshd=True)
    with SlurmCluster(tb, extra_conf=[f"SlurmdTimeout={SLURMD_TIMEOUT_S}"]) as cluster:
        yield cluster


@pytest.mark.parametrize("nodes", ["3", "2:3"])
def test_a_host_lost_inside_the_allocation(
    quick_to_notice: SlurmCluster, tmp_path: Path, nodes: str
) -> None:
    """node3's network gone mid-run (its bridge port down: every packet dropped): the ranks
    wait in their collectives (gloo: 30 minutes) and node3's task cannot say anything; Slurm
    tells the node down (srun: `Node failure on node3`). A fixed job ends with it (NODE_FAIL);
    an elastic one was allocated with `--no-kill`: its step goes on, the survivors' workers
    are stopped so that torchrun restarts them without node3, and it finishes. The story
    leads with the lost node, no survivor is blamed, the reachable nodes are proven clean
    and the allocation is gone."""
    cluster = quick_to_notice
    args = ("--nodes", nodes, "--max-restarts", "3", *ELASTIC_JOB)
    proc = start(cluster, tmp_path, *args)
    events = _until_stepping(proc, 3)
    cluster.tb.cut_link(VICTIM)
    try:
        out, err = outputs(proc, ENDS_WITHIN_S)
    finally:
        cluster.tb.restore_link(VICTIM)
    events += [json.loads(line) for line in out.splitlines()]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = events[-1]
    assert summary["event"] == "summary", (events[-5:], err[-3000:])
    told = _story_line(summary)
    assert told.startswith(f"node lost: node {VICTIM} — Slurm lost "), summary["detail"]
    survivors = {r["rank"] for r in summary["ranks"] if r["node"] != VICTIM}
    blamed = {r for i in summary["incidents"] if i["round"] == 0 for r in i["blamed"]}
    assert not blamed & survivors, summary["incidents"]
    # no survivor is told lost: srun stopping the step's tasks after the loss is no agent's
    lost = {n for i in summary["incidents"] if i["kind"] in ("agent_lost", "node_lost")
            for n in i["nodes"]}  # fmt: skip
    assert lost == {VICTIM}, summary["incidents"]
    if nodes == "3":
        assert summary["ok"] is False and proc.returncode == 1, summary["detail"]
        # the verdict and the culprit are Slurm's lost node, not a rank its end stopped first
        verdict = summary["verdict"]
        assert (verdict["signature"], verdict["node"]) == ("slurm_node_fail", VICTIM), verdict
        assert [r["node"] for r in summary["ranks"] if r["culprit"]] == [VICTIM], summary["ranks"]
    else:
        assert summary["ok"] is True and proc.returncode == 0, summary["detail"]
        assert summary["detail"].startswith("elastic: finished on 2 node(s) after 1 restart")
        asked = next(e for e in events if e["event"] == "allocation")
        assert "--no-kill" in asked["detail"], asked  # Slurm's default would end the job
        last = last_cycles(events)
        final = last[max(last)]
        assert sorted(m["node"] for m in final["members"]) == ["node1", "node2"], last
        assert final["cause"] == f"node {VICTIM} lost (srun: error: Node failure on {VICTIM})"
        assert {c["index"]: c for c in summary["cycles"]}[final["index"]]["step_reached"] == 16
    assert not named_slow(events)
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs["node1"] and proofs["node2"], proofs
    assert left_on_nodes(cluster.tb, HOSTS[:2]) == {}
    assert gone_from_squeue(cluster, job_of(events)), cluster.squeue_ids()


def test_the_console_killed_then_attached(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """SIGKILL of the headless console mid-run: the allocation and its step run on by
    themselves; `ddptui attach` finds the run, follows it to its end and releases the
    allocation, nothing left on any node."""
    proc = start(slurm_cluster, tmp_path, "--nodes", "3", *ELASTIC_JOB)
    events = _until_stepping(proc, 3)
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    job_id = job_of(events)
    proc.kill()
    proc.wait()
    assert all(pids_with_tag(f"{run_id}.{i}") for i in range(3))  # the job runs on
    assert job_id in slurm_cluster.squeue_ids()
    attach = start(slurm_cluster, tmp_path, run_id, "--headless", command="attach")
    out, err = outputs(attach, ENDS_WITHIN_S)
    followed = [json.loads(line) for line in out.splitlines()]
    assert followed and followed[-1]["event"] == "summary", (followed[-5:], err[-3000:])
    summary = followed[-1]
    assert summary["ok"] is True and attach.returncode == 0, summary["detail"]
    assert [e["state"] for e in followed if e["event"] == "allocation"][-1] == "released"
    proofs = {e["node"]: e["clean"] for e in followed if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert left_on_nodes(slurm_cluster.tb, HOSTS) == {}
    assert gone_from_squeue(slurm_cluster, job_id), slurm_cluster.squeue_ids()


@pytest.mark.parametrize("nodes", ["3", "2:3"])
def test_a_node_never_joins_the_rendezvous(
    slurm_cluster: SlurmCluster, tmp_path: Path, nodes: str
) -> None:
    """VICTIM's agent frozen (SIGSTOP) before it asks for the rendezvous, inside the
    allocation: a fixed job's other nodes wait for it until their join timeout and the story
    names it; an elastic job starts without it and, once finished, stops it."""
    proc = start(slurm_cluster, tmp_path, "--nodes", nodes, *NEVER_JOINS_JOB)
    events = never_joins(proc, lambda run_id: _victim_pids(run_id)[0], nodes, VICTIM)
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert left_on_nodes(slurm_cluster.tb, HOSTS) == {}
    assert gone_from_squeue(slurm_cluster, job_of(events)), slurm_cluster.squeue_ids()
