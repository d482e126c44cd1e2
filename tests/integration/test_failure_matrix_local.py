"""Every way a node dies, on the local backend: real torchrun agents on this machine, one of
them hurt mid-run in each way a real node dies, with the story the summary opens with, what
the job does (an elastic job shrinks and goes on, a fixed one stops, nobody waits in
torchrun's 300 s exit barrier) and nothing left running. docs/failures.md has the table."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cases import ROOT
from tests.integration.elastic_run import ELASTIC_JOB, last_cycles
from tests.integration.sshrun import read_until
from tests.procs import outputs, pids_with_tag

RUN = (sys.executable, "-m", "ddptui.cli", "run", "--headless", "--backend", "local")
VICTIM = "local2"  # the third pseudo-node (its tag: RUN_ID.2)
# Well under torchrun's 300 s exit barrier: a run that waits in it fails here.
ENDS_WITHIN_S = 150
# torchrun's own word for how long an agent waited for the others at the end
BARRIER = re.compile(r"Done waiting for other agents\. Elapsed: ([\d.]+) seconds")


@dataclass(frozen=True)
class Mode:
    """One way a node dies: the job's size, what is done to VICTIM, and what must follow."""

    nodes: str
    hurt: Callable[[Path, str], None]
    headline: str  # how the story's first line begins
    ok: bool  # whether the job finished (an elastic job that went on without VICTIM)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def _node_pids(run_id: str) -> tuple[list[int], list[int]]:
    """(VICTIM's torchrun agents, its workers)."""
    pids = pids_with_tag(f"{run_id}.2")
    agents = [p for p in pids if any(Path(w).name == "torchrun" for w in _cmdline(p)[:2])]
    return agents, [p for p in pids if p not in agents]


def _supervisor(state: Path, run_id: str) -> int:
    """VICTIM's job supervisor (the node helper that started its agent and waits for it)."""
    (pid_file,) = (state / "runs" / run_id / "nodes").glob(f"*-{VICTIM}.log.pid")
    return int(pid_file.read_text().split()[1])


def _kill(pids: list[int]) -> None:
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def agent_killed(state: Path, run_id: str) -> None:
    """SIGKILL of the torchrun agent alone: its worker is orphaned (parent 1), still in the
    job's collectives."""
    agents, workers = _node_pids(run_id)
    assert workers
    _kill(agents)


def worker_killed(state: Path, run_id: str) -> None:
    """SIGKILL of the worker alone, as the kernel's OOM killer ends one: its agent sees it."""
    _kill(_node_pids(run_id)[1])


def host_lost(state: Path, run_id: str) -> None:
    """Everything the node ran killed at once: its helper, its agent, its worker."""
    agents, workers = _node_pids(run_id)
    _kill([_supervisor(state, run_id), *agents, *workers])


def helper_killed(state: Path, run_id: str) -> None:
    """SIGKILL of the node helper that started the job and waits for it (the job runs on)."""
    _kill([_supervisor(state, run_id)])


MODES = {
    "agent_killed_elastic": Mode("2:3", agent_killed, f"agent lost: node {VICTIM}", True),
    "agent_killed_fixed": Mode("3", agent_killed, f"agent lost: node {VICTIM}", False),
    "worker_killed_fixed": Mode("3", worker_killed, "restarted: rank ", True),
    # a pseudo-node lost whole: to the console, its agent was killed (this machine is up)
    "host_lost_elastic": Mode("2:3", host_lost, f"agent lost: node {VICTIM}", True),
    "host_lost_fixed": Mode("3", host_lost, f"agent lost: node {VICTIM}", False),
    "helper_killed": Mode("3", helper_killed, "", True),
}


def _start(tmp_path: Path, nodes: str, *job: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*RUN, "--nodes", nodes, "--max-restarts", "3", *(job or ELASTIC_JOB)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)},
    )


def _until_stepping(proc: subprocess.Popen[str], ranks: int) -> list[dict[str, Any]]:
    """Events until each of `ranks` ranks printed its second step."""
    stepped: set[int] = set()

    def all_stepping(e: dict[str, Any]) -> bool:
        if e["event"] == "line" and e["rank"] is not None and " step=2 " in e["text"]:
            stepped.add(e["rank"])
        return len(stepped) == ranks or e["event"] == "summary"

    events = read_until(proc, all_stepping)
    assert len(stepped) == ranks, events[-5:]
    return events


def _to_the_end(proc: subprocess.Popen[str], events: list[dict[str, Any]]) -> dict[str, Any]:
    out, err = outputs(proc, ENDS_WITHIN_S)
    events += [json.loads(line) for line in out.splitlines()]
    assert events[-1]["event"] == "summary", (events[-5:], err[-3000:])
    return events[-1]


def named_slow(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The straggler watch's namings: none is right in these jobs, whose ranks all step at
    one pace before a node dies and after the job restarts or shrinks."""
    return [e for e in events if e["event"] == "straggler" and e["ranks"]]


def _story_line(summary: dict[str, Any]) -> str:
    """The story's headline as the summary tells it: first for a run that failed, after how
    the run finished for one that did."""
    if not summary["ok"]:
        return str(summary["headline"])
    line = str(summary["detail"].splitlines()[-1])
    return line.split("; ", 1)[1] if line.startswith("finished") else line


def _barrier_waits(summary: dict[str, Any]) -> list[float]:
    """How long each agent waited in torchrun's exit barrier, by its own log."""
    logs = (Path(summary["run_dir"]) / "nodes").glob("*.log")
    return [float(m) for log in logs for m in BARRIER.findall(log.read_text(errors="replace"))]


@pytest.mark.parametrize("mode", list(MODES))
def test_a_node_dies(tmp_path: Path, mode: str) -> None:
    spec = MODES[mode]
    proc = _start(tmp_path, spec.nodes)
    events = _until_stepping(proc, 3)
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    spec.hurt(tmp_path / "state", run_id)
    summary = _to_the_end(proc, events)

    assert summary["ok"] is spec.ok, summary["detail"]
    assert proc.returncode == (0 if spec.ok else 1)
    incidents = summary["incidents"]
    if spec.headline:
        told = _story_line(summary)
        assert told.startswith(spec.headline), summary["detail"]
        lead = next(i for i in incidents if i["headline"] == told)
        assert lead["nodes"] == [VICTIM], lead
    else:  # the run was healthy: nothing to tell
        assert not incidents and not summary["headline"], summary["detail"]
    survivors = {r["rank"] for r in summary["ranks"] if r["node"] != VICTIM}
    blamed = {rank for i in incidents for rank in i["blamed"] if i["round"] == 0}
    assert not blamed & survivors, incidents  # a surviving worker is never the culprit
    named = set(re.findall(r"\brank \d+ on (\w+)", summary["detail"]))
    assert named <= {VICTIM}, summary["detail"]  # nor named by any line of the outcome
    cycles = last_cycles(events)
    if spec.nodes == "2:3" and spec.ok:  # shrank, then went on to the end without VICTIM
        last = cycles[max(cycles)]
        assert sorted(m["node"] for m in last["members"]) == ["local0", "local1"], cycles
        assert {c["index"]: c for c in summary["cycles"]}[last["index"]]["step_reached"] == 16
    assert all(wait < 30 for wait in _barrier_waits(summary)), _barrier_waits(summary)
    assert not named_slow(events)
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(["local0", "local1", VICTIM], True), proofs
    assert not pids_with_tag(run_id)


def test_the_console_killed_then_attached(tmp_path: Path) -> None:
    """SIGKILL of the headless console mid-run: the job runs on by itself; `ddptui attach`
    finds it, follows it to its end and leaves nothing running."""
    proc = _start(tmp_path, "3")
    events = _until_stepping(proc, 3)
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    proc.kill()
    proc.wait()
    assert len(pids_with_tag(run_id)) >= 6  # three agents and their workers, on their own
    attach = subprocess.Popen(
        [sys.executable, "-m", "ddptui.cli", "attach", run_id, "--headless"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)},
    )
    out, err = outputs(attach, ENDS_WITHIN_S)
    followed = [json.loads(line) for line in out.splitlines()]
    assert followed and followed[-1]["event"] == "summary", (followed[-5:], err[-3000:])
    summary = followed[-1]
    assert summary["ok"] is True and attach.returncode == 0, summary["detail"]
    proofs = {e["node"]: e["clean"] for e in followed if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(["local0", "local1", VICTIM], True), proofs
    assert not pids_with_tag(run_id)


# A join timeout the test can wait out: the node that never joins is named at its end.
NEVER_JOINS_JOB = (
    *ELASTIC_JOB[:2], "--rdzv-conf", "last_call_timeout=2,join_timeout=15", *ELASTIC_JOB[4:]
)  # fmt: skip


def freeze_before_it_asks(agents_of: Callable[[], list[int]]) -> list[int]:
    """VICTIM's agents frozen (SIGSTOP) as soon as they exist: its agent starts in well under
    a second, torch's import before it asks for the rendezvous takes two."""
    deadline = time.monotonic() + 30
    while not (agents := agents_of()) and time.monotonic() < deadline:
        time.sleep(0.02)
    for agent in agents:
        os.kill(agent, signal.SIGSTOP)
    return agents


def never_joins(
    proc: subprocess.Popen[str], agents_of: Callable[[str], list[int]], nodes: str, victim: str
) -> list[dict[str, Any]]:
    """`proc`'s run (`--nodes nodes`) with `victim`'s agents (`agents_of(run_id)`) frozen
    before they ask for the rendezvous, to its end: what follows, on every backend, is
    asserted (a fixed job fails at launch naming it; an elastic job finishes on the others
    and, once finished, stops it); every event, the summary last."""
    events = read_until(proc, lambda e: e["event"] == "plan")
    run_id = events[-1]["run_id"]
    agents = freeze_before_it_asks(lambda: agents_of(run_id))
    summary = _to_the_end(proc, events)
    assert agents
    code = proc.returncode
    asked = {e["node"] for e in events if e["event"] == "rendezvous_asked"}
    assert victim not in asked  # frozen before it asked
    if nodes == "3":
        assert summary["ok"] is False and code == 1, summary["detail"]
        assert summary["headline"].startswith(
            f"launch failed — {victim} never joined the rendezvous (its agent never asked"
        ), summary["detail"]
        return events
    assert summary["ok"] is True and code == 0, summary["detail"]
    assert summary["world_size"] == 2  # the world it finished in, not the most it allowed
    cycles = last_cycles(events)
    assert all(victim not in [m["node"] for m in c["members"]] for c in cycles.values())
    said = [e["message"] for e in events if e["event"] == "notice"]
    assert f"{victim} never joined the rendezvous: stopped" in said
    assert summary["detail"].startswith(
        f"elastic: finished on 2 node(s); {victim} never joined the rendezvous"
    ), summary["detail"]
    return events


@pytest.mark.parametrize("nodes", ["3", "2:3"])
def test_a_node_never_joins_the_rendezvous(tmp_path: Path, nodes: str) -> None:
    """VICTIM's agent frozen (SIGSTOP) before it asks for the rendezvous: a fixed job's other
    nodes wait for it until their join timeout, and the story names it; an elastic job starts
    without it and, once finished, stops it instead of waiting for it forever."""
    proc = _start(tmp_path, nodes, *NEVER_JOINS_JOB)
    events = never_joins(proc, lambda run_id: _node_pids(run_id)[0], nodes, VICTIM)
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    proofs = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert proofs == dict.fromkeys(["local0", "local1", VICTIM], True), proofs
    assert not pids_with_tag(run_id)
