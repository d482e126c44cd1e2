"""RunFollower and event_log: a run followed from its directory as its session writes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.core.diagnose.stall_events import StallGroup, StallReport
from ddptui.core.events import (
    Event,
    GpuFlag,
    GpuHolder,
    GpuProof,
    GpuReport,
    GpuStat,
    NodeChanged,
    NodeLines,
    NodeState,
    Notice,
    PhaseChanged,
    RankChanged,
    RankState,
    RankSummary,
    RunPhase,
    TeardownReport,
)
from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.event_log import EventLogTail, decode_event
from ddptui.core.runs.follow import RunFollower
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.drill import DrillReport, RankExit

GPUS = (GpuStat(0, 90, 10, 80, 300.5, 60, (0, 1), "GPU-1"),)
PROOF = GpuProof(False, ((0, 5),), ((0, 1),), (GpuHolder(12, 0, 5, "python"),))
CULPRIT = RankSummary(3, "local1", 1, RankState.FAILED, 1, "boom", ("tb",), culprit=True)
RECORDED = [
    PhaseChanged(RunPhase.STALLED, "no rank"),
    NodeChanged("local0", NodeState.EXITED, 1, "agent exited"),
    Notice("warning", "careful"),
    GpuReport("n", GPUS, (GpuFlag("idle", 0, 1, "d"),)),
    TeardownReport("n", False, (12, 13), "left", PROOF),
    StallReport(31.0, (3,), (StallGroup((0, 1), ("a.py:1 in f",), "collective 4"),), "py-spy"),
    RunSummary(False, 4, (CULPRIT,), "/x", "r1", "rank 3 failed", stopped_by="failure"),
    DrillReport(
        ("USR1",),
        10.0,
        60.0,
        (
            RankExit("n0", 0, 0, 12, 1.0, 0.5, False, 0),
            RankExit("n1", 1, 0, 9, 1.0, None, True, None),
        ),
        ("n2: not reached",),
    ),  # fmt: skip
]


@pytest.mark.parametrize("event", RECORDED)
def test_recorded_events_read_back_as_they_were(event: Event) -> None:
    back = decode_event(event.to_json())
    if isinstance(event, StallReport):  # the file keeps no time of its own for a stall
        assert back == StallReport(**{**event.__dict__, "ts": back.ts})  # type: ignore[union-attr]
    else:
        assert back == event


def test_kinds_a_follower_reads_from_the_logs_are_left_out() -> None:
    rank = RankChanged(3, "local1", 1, RankState.RUNNING)
    assert decode_event(rank.to_json()) is None


def test_the_tail_waits_for_a_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    line = Notice("info", "one").to_json()
    path.write_text(line + "\n" + line[:10])
    tail = EventLogTail(path)
    assert [e.message for e in tail.new()] == ["one"]  # type: ignore[attr-defined]
    with open(path, "a") as f:
        f.write(line[10:] + "\nnot json\n")
    assert [e.message for e in tail.new()] == ["one"]  # type: ignore[attr-defined]
    assert tail.bad_lines == 1


def _run(tmp_path: Path) -> RunDir:
    spec = make_spec(backend="local", nodes=2, nproc_per_node=2, script="x.py")
    plan = build_plan(spec, [NodeTarget(f"local{i}", "127.0.0.1") for i in range(2)], "r1", 29400)
    run = RunDir.create("r1", root=tmp_path)
    run.write_spec(spec)
    run.write_plan(plan, {})
    return run


def test_follower_reads_lines_ranks_and_the_end_as_they_are_written(tmp_path: Path) -> None:
    run = _run(tmp_path)
    seen: list[Event] = []
    follower = RunFollower(run.read_spec(), seen.append, RunDir.open(str(run.path)))
    log0, log1 = run.node_log(0, "local0"), run.node_log(1, "local1")
    log0.write_bytes(b"[ddptui:0:0]:hello\n[ddptui:1:1]:hi\n")
    log1.write_bytes(b"[ddptui:2:0]:hel")  # a line half written waits
    assert follower.step(1.0) is None
    lines = [t for e in seen if isinstance(e, NodeLines) for t, *_ in e.lines]
    assert lines == ["hello", "hi"]
    running = {(e.node, e.local_rank) for e in seen if isinstance(e, RankChanged)}
    assert running == {("local0", 0), ("local0", 1)}

    seen.clear()
    with open(log1, "ab") as f:
        f.write(b"lo\n")
    run.record(NodeChanged("local1", NodeState.EXITED, 0))
    follower.step(2.0)
    assert [t for e in seen if isinstance(e, NodeLines) for t, *_ in e.lines] == ["hello"]
    assert any(isinstance(e, NodeChanged) and e.state == NodeState.EXITED for e in seen)

    summary = RunSummary(True, 4, (), str(run.path), "r1")
    run.record(summary)
    assert follower.step(3.0) == summary
    run.close()


def test_a_log_written_again_from_its_start_is_not_shown_twice(tmp_path: Path) -> None:
    """An attach after a detach writes the node's log again from the first line."""
    run = _run(tmp_path)
    seen: list[Event] = []
    follower = RunFollower(run.read_spec(), seen.append, run)
    log0 = run.node_log(0, "local0")
    log0.write_bytes(b"[ddptui:0:0]:one\n[ddptui:0:0]:two\n")
    follower.step(1.0)
    log0.write_bytes(b"[ddptui:0:0]:one\n")
    follower.step(2.0)
    with open(log0, "ab") as f:
        f.write(b"[ddptui:0:0]:two\n[ddptui:0:0]:three\n")
    follower.step(3.0)
    lines = [t for e in seen if isinstance(e, NodeLines) for t, *_ in e.lines]
    assert lines == ["one", "two", "three"]


def test_a_detached_run_is_followed_on_through_whoever_attaches_next(tmp_path: Path) -> None:
    """Its session's detached summary is not the run's end: a follower (a read-only tab)
    goes on reading the logs and ends only with the summary of the session that ends it."""
    run = _run(tmp_path)
    seen: list[Event] = []
    follower = RunFollower(run.read_spec(), seen.append, run)
    detached = RunSummary(False, 4, (), str(run.path), "r1", "detached", detached=True)
    run.record(detached)
    log0 = run.node_log(0, "local0")
    log0.write_bytes(b"[ddptui:0:0]:before\n")
    assert follower.step(1.0) is None
    with open(log0, "ab") as f:
        f.write(b"[ddptui:0:0]:after the detach\n")
    run.record(PhaseChanged(RunPhase.TEARING_DOWN, "operator"))
    assert follower.step(2.0) is None
    lines = [t for e in seen if isinstance(e, NodeLines) for t, *_ in e.lines]
    assert lines == ["before", "after the detach"]
    assert not any(isinstance(e, RunSummary) for e in seen)
    stopped = RunSummary(False, 4, (), str(run.path), "r1", "torn down", stopped_by="operator")
    run.record(stopped)
    assert follower.step(3.0) == stopped
    run.close()
