"""torchft jobs for real: the Lighthouse and one torchrun per replica group (gloo), on the
local backend and on the SSH testbed. Once every group commits steps, one group is killed
through headless mode's control file (`kill_group NODE`: every worker of it, SIGKILL); the
other groups keep stepping while it is out, its torchrun starts it again and it heals from a
live group (the Lighthouse's quorum: it left, then joined steps behind); the run finishes
green and teardown proves every node clean, the Lighthouse included. On Slurm, the same
within one allocation. And the kill that lands while a peer waits for the victim in the
gradients' all-reduce (a straggler group, so it always does): the peer steps on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from testbed import SlurmCluster
from testbed.netns import Testbed
from tests.cases import ROOT
from tests.integration.elastic_run import act_then_finish
from tests.integration.slurmrun import gone_from_squeue, job_of, left_on_nodes, node_logs, start
from tests.integration.sshrun import popen_headless, read_until

TRAINER = ROOT / "trainer" / "ft_ddp.py"
_STEP = re.compile(r"^ft_(\d+) rank \d+: step=(\d+) ")
FT_JOB = ("--nproc-per-node", "1", "--hang-timeout", "0", "--lines")


def _committed(events: list[dict[str, Any]]) -> dict[int, list[tuple[float, int]]]:
    """Each replica group's committed steps, (time seen, step), from its ranks' lines."""
    steps: dict[int, list[tuple[float, int]]] = {}
    for e in events:
        if e["event"] == "line" and e["rank"] is not None:
            found = _STEP.match(e["text"])
            if found:
                steps.setdefault(int(found[1]), []).append((e["ts"], int(found[2])))
    return steps


def kill_a_group_once_all_step(
    proc: subprocess.Popen[str], state: Path, victim: str, groups: int
) -> list[dict[str, Any]]:
    """Once every group committed step 5, kill `victim`'s group through the control file;
    every event to the summary."""
    stepping: set[int] = set()

    def all_stepping(e: dict[str, Any]) -> bool:
        stepping.update(g for g, s in _committed([e]).items() if s[-1][1] >= 5)
        return len(stepping) == groups or e["event"] == "summary"

    events = read_until(proc, all_stepping)
    assert events[-1]["event"] != "summary", events[-5:]
    return act_then_finish(proc, state, events, f"kill_group {victim}")


def check_killed_group_healed(
    events: list[dict[str, Any]], nodes: list[str], victim: int, steps: int
) -> None:
    """The story every backend must tell, from the events."""
    summary = events[-1]
    assert summary["ok"] is True, summary["detail"]
    assert summary["detail"].startswith(f"torchft: finished on {len(nodes)} of {len(nodes)}")
    notices = [e["message"] for e in events if e["event"] == "notice"]
    killed = [n for n in notices if n.startswith("fault injection: killed every worker")]
    assert len(killed) == 1 and nodes[victim] in killed[0], notices
    kill_ts = next(e["ts"] for e in events if e["event"] == "notice" and e["message"] in killed)
    changes = [e["change"] for e in events if e["event"] == "quorum" and e["change"]]
    name = f"ft_{victim}"
    # it came back as another incarnation, behind, and healed from a peer: after the
    # Lighthouse saw it leave, or before it could (a quick restart)
    back = next(c for c in changes if c["ts"] > kill_ts and name in c["joined"] + c["restarted"])
    assert dict((r, n) for r, n in back["behind"])[name] > 0, back
    out_ts = next((c["ts"] for c in changes if c["ts"] > kill_ts and name in c["left"]), None)
    assert out_ts is None or out_ts < back["ts"]
    assert [c["quorum_id"] for c in summary["quorums"]] == [c["quorum_id"] for c in changes]
    committed = _committed(events)
    for group in range(len(nodes)):  # every group reached the last step
        assert committed[group][-1][1] == steps, (group, committed[group][-3:])
    at_kill = {g: max(s for ts, s in committed[g] if ts < kill_ts) for g in committed}
    for group in set(range(len(nodes))) - {victim}:  # the others stepped on, never restarted
        later = [s for ts, s in committed[group] if ts > kill_ts]
        assert later == list(range(at_kill[group] + 1, steps + 1)), (group, later[:5])
        if out_ts is not None:  # and while it was out
            assert any(out_ts < ts < back["ts"] for ts, _ in committed[group])
    victim_steps = [s for ts, s in committed[victim] if ts > back["ts"]]
    assert victim_steps and victim_steps[0] > at_kill[victim], victim_steps[:3]  # healed
    restarted = [e for e in events if e["event"] == "rank" and e.get("restarts")]
    assert {e["node"] for e in restarted} == {nodes[victim]}, restarted[-3:]
    assert {e["rank"] for e in events if e["event"] == "rank" and e["rank"] is not None} == set(
        range(len(nodes))
    )  # each group's rank 0 shown at its place in the job
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(nodes, True), proofs


def popen_local(tmp_path: Path, groups: int, *trainer_args: str) -> subprocess.Popen[str]:
    """A headless torchft run of `groups` pseudo-nodes of the bundled trainer; state under
    tmp_path/state."""
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--ft-replicas", str(groups)]
    argv += [*FT_JOB, str(TRAINER), *trainer_args]
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env
    )


def test_local_three_replica_groups_one_killed_heals(tmp_path: Path) -> None:
    state = tmp_path / "state"
    steps = 60
    proc = popen_local(tmp_path, 3, "--steps", str(steps), "--step-time", "0.25")
    events = kill_a_group_once_all_step(proc, state, "local1", 3)
    check_killed_group_healed(events, ["local0", "local1", "local2"], 1, steps)
    plan = next(e for e in events if e["event"] == "plan")
    lines = [line for _, line in plan["commands"]]
    assert "torchft_lighthouse" in lines[0] and all("lighthouse" not in x for x in lines[1:])
    ports = {re.findall(r"--rdzv_endpoint=127\.0\.0\.1:(\d+)", x)[0] for x in lines}
    assert len(ports) == 3  # pseudo-nodes share an address: a rendezvous port each


def test_a_group_killed_while_its_peer_waits_in_the_allreduce_leaves_the_peer_stepping(
    tmp_path: Path,
) -> None:
    """Group 1 comes late to every all-reduce (a straggler), so group 0 is waiting for it
    there when it is killed: gloo's read fails under the comm hook. The peer must take it as
    a step not committed and step on (torchft 0.2.0's own hook asserted: it crashed too).
    No sleep between steps: group 1 asks for its next quorum as soon as it commits, so from
    then on the peer meets it in the all-reduce; only a kill in those few milliseconds would
    find the peer waiting for a quorum instead."""
    steps = 30
    proc = popen_local(
        tmp_path, 2, "--steps", str(steps), "--step-time", "0", "--slow-group", "1",
        "--slow-s", "0.6",
    )  # fmt: skip
    events = kill_a_group_once_all_step(proc, tmp_path / "state", "local1", 2)
    check_killed_group_healed(events, ["local0", "local1"], 1, steps)
    peer = node_logs(events[-1])["000-local0.log"]
    assert "got exception waiting for work" in peer  # the kill came mid-all-reduce
    assert "AssertionError" not in peer


def test_ssh_two_replica_groups_one_killed_heals(testbed: Testbed, tmp_path: Path) -> None:
    state = tmp_path / "state"
    steps = 50
    proc = popen_headless(
        testbed, state, "--hosts", "node[1-2]", "--ft-replicas", "2", *FT_JOB,
        str(TRAINER), "--steps", str(steps), "--step-time", "0.25",
    )  # fmt: skip
    events = kill_a_group_once_all_step(proc, state, "node2", 2)
    check_killed_group_healed(events, ["node1", "node2"], 1, steps)
    assert testbed.wait_clean(["node1", "node2"]) == {}


def test_slurm_two_replica_groups_one_killed_heals_in_one_allocation(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    steps = 50
    proc = start(
        slurm_cluster, tmp_path, "--nodes", "2", "--ft-replicas", "2", *FT_JOB,
        str(TRAINER), "--steps", str(steps), "--step-time", "0.25",
    )  # fmt: skip
    events = kill_a_group_once_all_step(proc, tmp_path / "state", "node2", 2)
    check_killed_group_healed(events, ["node1", "node2"], 1, steps)
    job_id = job_of(events)
    assert left_on_nodes(slurm_cluster.tb, ["node1", "node2"]) == {}
    assert gone_from_squeue(slurm_cluster, job_id), slurm_cluster.squeue_ids()
