"""Every way a node dies, over SSH: three sshd hosts (network namespaces) with real torchrun,
one of them hurt mid-run in each way a real node dies, with the story the summary opens with,
what the job does (an elastic job shrinks and goes on, a fixed one stops, nobody waits in
torchrun's 300 s exit barrier) and nothing left running on any host. docs/failures.md has
the table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddptui.core.node import STDIN_PROGRAM
from testbed.netns import Testbed
from tests.integration.elastic_run import ELASTIC_JOB, last_cycles
from tests.integration.sshrun import popen_headless, state_env
from tests.integration.test_failure_matrix_local import (
    ENDS_WITHIN_S,
    NEVER_JOINS_JOB,
    _barrier_waits,
    _cmdline,
    _story_line,
    _until_stepping,
    named_slow,
    never_joins,
)
from tests.procs import outputs, pids_with_tag

HOSTS = ["node1", "node2", "node3"]
VICTIM = "node3"  # the third host (its tag: RUN_ID.2)
HELPER = STDIN_PROGRAM  # how the node helper runs: its program read from stdin


@dataclass(frozen=True)
class Mode:
    """One way a node dies: the job's size, what is done to VICTIM, and what must follow."""

    nodes: str
    hurt: Callable[[Testbed, str], None]
    headline: str  # how the story's first line begins
    ok: bool  # whether the job finished (an elastic job that went on without VICTIM)


def _victim_pids(run_id: str) -> tuple[list[int], list[int]]:
    """(VICTIM's torchrun agents, its workers): the hosts share this machine's PID space.
    A worker is what an agent started (torchrun sets its TORCHELASTIC_RUN_ID), never the
    node helper or a Slurm step's own processes, which carry the job's tag too."""
    pids = pids_with_tag(f"{run_id}.2")
    agents = [p for p in pids if any(Path(w).name == "torchrun" for w in _cmdline(p)[:2])]
    return agents, [p for p in pids if p not in agents and _is_worker(p)]


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"\0TORCHELASTIC_RUN_ID=" in b"\0" + f.read()
    except OSError:
        return False


def agent_killed(tb: Testbed, run_id: str) -> None:
    """SIGKILL of the torchrun agent alone: its worker is orphaned (parent 1), still in the
    job's collectives."""
    agents, workers = _victim_pids(run_id)
    assert agents and workers
    for pid in agents:
        os.kill(pid, signal.SIGKILL)


def worker_killed(tb: Testbed, run_id: str) -> None:
    """SIGKILL of the worker alone, as the kernel's OOM killer ends one: its agent sees it."""
    workers = _victim_pids(run_id)[1]
    assert workers
    for pid in workers:
        os.kill(pid, signal.SIGKILL)


def helper_killed(tb: Testbed, run_id: str) -> None:
    """SIGKILL of the node helper that started the agent and waits for it (its parent)."""
    agents = _victim_pids(run_id)[0]
    assert agents
    with open(f"/proc/{agents[0]}/stat") as f:
        os.kill(int(f.read().rsplit(")", 1)[1].split()[1]), signal.SIGKILL)


def link_cut(tb: Testbed, run_id: str) -> None:
    """The host's network gone (its bridge port down: no RST, every packet dropped)."""
    tb.cut_link(VICTIM)


MODES = {
    "agent_killed_elastic": Mode("2:3", agent_killed, f"agent lost: node {VICTIM}", True),
    "agent_killed_fixed": Mode("3", agent_killed, f"agent lost: node {VICTIM}", False),
    "worker_killed_fixed": Mode("3", worker_killed, "restarted: rank ", True),
    "host_lost_fixed": Mode("3", link_cut, f"node lost: node {VICTIM}", False),
    "host_lost_elastic": Mode("2:3", link_cut, f"node lost: node {VICTIM}", True),
    "helper_killed": Mode("3", helper_killed, "", True),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_a_node_dies(clean_testbed: Testbed, tmp_path: Path, mode: str) -> None:
    tb, spec = clean_testbed, MODES[mode]
    args = ("--hosts", "node[1-3]", "--nodes", spec.nodes, "--max-restarts", "3", *ELASTIC_JOB)
    proc = popen_headless(tb, tmp_path / "state", *args)
    events = _until_stepping(proc, 3)
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    spec.hurt(tb, run_id)
    out, err = outputs(proc, ENDS_WITHIN_S)
    events += [json.loads(line) for line in out.splitlines()]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = events[-1]
    assert summary["event"] == "summary", (events[-5:], err[-3000:])

    assert summary["ok"] is spec.ok, summary["detail"]
    assert proc.returncode == (0 if spec.ok else 1)
    if spec.headline:
        told = _story_line(summary)
        assert told.startswith(spec.headline), summary["detail"]
        lead = next(i for i in summary["incidents"] if i["headline"] == told)
        assert lead["nodes"] == [VICTIM], lead
    else:  # the run was healthy: nothing to tell
        assert not summary["incidents"] and not summary["headline"], summary["detail"]
    survivors = {r["rank"] for r in summary["ranks"] if r["node"] != VICTIM}
    blamed = {r for i in summary["incidents"] if i["round"] == 0 for r in i["blamed"]}
    assert not blamed & survivors, summary["incidents"]  # a survivor is never the culprit
    cycles = last_cycles(events)
    if spec.nodes == "2:3":  # shrank, then went on to the end without VICTIM
        last = cycles[max(cycles)]
        assert sorted(m["node"] for m in last["members"]) == ["node1", "node2"], cycles
        assert {c["index"]: c for c in summary["cycles"]}[last["index"]]["step_reached"] == 16
    assert all(wait < 30 for wait in _barrier_waits(summary)), _barrier_waits(summary)
    assert not named_slow(events)
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    if spec.hurt is link_cut:
        # unreachable, so not proven clean; what runs there is this job's alone, and stays
        # until the host is back (a real lost host takes it down with it)
        assert proofs == {"node1": True, "node2": True, VICTIM: False}, proofs
        tb.restore_link(VICTIM)
        job = set(pids_with_tag(f"{run_id}.2"))
        assert job, "the cut host's job: nothing reached it"
        others = [p for p in tb.pids_in(VICTIM) if p not in job]
        helpers = [p for p in others if "sshd" in _cmdline(p)[0] or HELPER in _cmdline(p)]
        assert others == helpers, [_cmdline(p) for p in others]
        assert tb.wait_clean(HOSTS[:2]) == {}
    else:
        assert proofs == dict.fromkeys(HOSTS, True), proofs
        assert tb.wait_clean(HOSTS) == {}


def test_the_console_killed_then_attached(clean_testbed: Testbed, tmp_path: Path) -> None:
    """SIGKILL of the headless console mid-run: the job runs on by itself on every host;
    `ddptui attach` finds it, follows it to its end and leaves nothing running."""
    tb, state = clean_testbed, tmp_path / "state"
    args = ("--hosts", "node[1-3]", "--nodes", "3", *ELASTIC_JOB)
    proc = popen_headless(tb, state, *args)
    events = _until_stepping(proc, 3)
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    proc.kill()
    proc.wait()
    assert all(pids_with_tag(f"{run_id}.{i}") for i in range(3))  # the job runs on
    attach = subprocess.Popen(
        tb.ns_argv("head", [sys.executable, "-m", "ddptui.cli", "attach", run_id, "--headless"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=state_env(state),
    )
    out, err = outputs(attach, ENDS_WITHIN_S)
    followed = [json.loads(line) for line in out.splitlines()]
    assert followed and followed[-1]["event"] == "summary", (followed[-5:], err[-3000:])
    summary = followed[-1]
    assert summary["ok"] is True and attach.returncode == 0, summary["detail"]
    proofs = {e["node"]: e["clean"] for e in followed if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert tb.wait_clean(HOSTS) == {}


@pytest.mark.parametrize("nodes", ["3", "2:3"])
def test_a_node_never_joins_the_rendezvous(
    clean_testbed: Testbed, tmp_path: Path, nodes: str
) -> None:
    """VICTIM's agent frozen (SIGSTOP) before it asks for the rendezvous, over SSH: a fixed
    job's other hosts wait for it until their join timeout and the story names it; an
    elastic job starts without it and, once finished, stops it instead of waiting for it."""
    tb = clean_testbed
    args = ("--hosts", "node[1-3]", "--nodes", nodes, *NEVER_JOINS_JOB)
    proc = popen_headless(tb, tmp_path / "state", *args)
    events = never_joins(proc, lambda run_id: _victim_pids(run_id)[0], nodes, VICTIM)
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(HOSTS, True), proofs
    assert tb.wait_clean(HOSTS) == {}
