"""The rank state machine, fed with real torchrun output captured on this machine."""

from __future__ import annotations

import pytest

from ddptui.core.diagnose.failures import culprit_cell
from ddptui.core.diagnose.rank_checks import check_hangs
from ddptui.core.events import NodeLines, RankChanged, RankState
from ddptui.core.monitor.agent_log import AgentLogParser, Assigned, GroupSucceeded, WorkerFailed
from ddptui.core.monitor.monitor import Monitor
from tests.cases import TORCHRUN_CAPTURES as DATA


def _feed(monitor: Monitor, node: str, name: str) -> list:
    events = monitor.feed(node, (DATA / name).read_bytes())
    return events + monitor.end_of_output(node)


def test_agent_parser_reads_rendezvous_result() -> None:
    parser = AgentLogParser()
    facts = []
    for line in (DATA / "success_node1.log").read_text().splitlines():
        facts += parser.feed(line)
    assert Assigned(1, (0, 1), (2, 3), 0) in facts
    assert GroupSucceeded() in facts


def test_agent_parser_reads_failure_summary_and_root_cause() -> None:
    parser = AgentLogParser()
    facts = []
    for line in (DATA / "crash_node1.log").read_text().splitlines():
        facts += parser.feed(line)
    assert WorkerFailed(1, 1) in facts  # the early "failed (exitcode: 1) local_rank: 1" line
    assert WorkerFailed(0, -15, 2, False) in facts
    assert WorkerFailed(1, 1, 3, True) in facts


def test_successful_run_goes_assigned_running_done() -> None:
    m = Monitor(["n0", "n1"], 2)
    events = _feed(m, "n0", "success_node0.log") + _feed(m, "n1", "success_node1.log")
    states = [(e.rank, e.state) for e in events if isinstance(e, RankChanged)]
    for rank in range(4):
        seq = [s for r, s in states if r == rank]
        assert seq == [RankState.ASSIGNED, RankState.RUNNING, RankState.DONE]
    assert [(c.rank, c.state) for c in m.board.all_cells()] == [
        (0, RankState.DONE),
        (1, RankState.DONE),
        (2, RankState.DONE),
        (3, RankState.DONE),
    ]


def test_lines_are_attributed_to_the_right_rank() -> None:
    m = Monitor(["n1"], 2)
    events = _feed(m, "n1", "success_node1.log")
    lines = [line for e in events if isinstance(e, NodeLines) for line in e.each()]
    assert [line.seq for line in lines] == list(range(1, len(lines) + 1))
    by_rank = {(e.rank, e.text) for e in lines if e.rank is not None}
    assert (2, "hello from 2") in by_rank
    assert (3, "partial done") in by_rank
    assert (2, "partial done") in by_rank


def test_crash_marks_failed_ranks_with_exit_codes_and_traceback() -> None:
    m = Monitor(["n0", "n1"], 2)
    _feed(m, "n1", "crash_node1.log")
    m.board.node_exited("n1", 1)
    cells = {c.rank: c for c in m.board.all_cells() if c.rank is not None}
    assert cells[3].state == RankState.FAILED and cells[3].exit_code == 1
    assert cells[2].state == RankState.FAILED and cells[2].exit_code == -15
    assert cells[3].error == "RuntimeError: boom"
    assert cells[3].traceback[0].startswith("Traceback")
    assert culprit_cell(m.board) is cells[3]


def test_node_exit_zero_finishes_ranks_that_never_printed() -> None:
    m = Monitor(["n0"], 2)
    events = m.board.node_exited("n0", 0)
    assert [e.state for e in events] == [RankState.DONE, RankState.DONE]


def test_node_failure_marks_remaining_ranks_failed() -> None:
    m = Monitor(["n0"], 2)
    m.board.assign("n0", Assigned(0, (0, 1), (0, 1), 0))
    events = m.board.node_exited("n0", -9)
    assert all(isinstance(e, RankChanged) and e.state == RankState.FAILED for e in events)


def test_unknown_script_output_still_lights_the_grid() -> None:
    m = Monitor(["n0"], 1)
    events = m.feed("n0", b"[ddptui:0:0]:\xe2\x9c\x93 my own format 42%\n")
    assert any(
        isinstance(e, RankChanged) and e.state == RankState.RUNNING and e.rank == 0 for e in events
    )


def test_lines_for_a_local_rank_outside_the_grid_do_not_crash() -> None:
    m = Monitor(["n0"], 1)
    events = m.feed("n0", b"[ddptui:7:5]:stray\n")
    assert [type(e) for e in events] == [NodeLines]
    assert [(line.text, line.rank, line.local_rank) for line in events[0].each()] == [
        ("stray", 7, 5)
    ]


def test_silent_rank_turns_hung_while_others_progress() -> None:
    m = Monitor(["n0"], 2)
    m.feed("n0", b"[ddptui:0:0]:a\n[ddptui:1:1]:b\n", now=100.0)
    m.feed("n0", b"[ddptui:0:0]:still going\n", now=200.0)
    events = check_hangs(m.board, now=201.0, timeout=60.0)
    assert [(e.rank, e.state) for e in events] == [(1, RankState.HUNG)]
    back = m.feed("n0", b"[ddptui:1:1]:back\n", now=202.0)
    assert any(isinstance(e, RankChanged) and e.state == RankState.RUNNING for e in back)


def test_restart_reassigns_ranks() -> None:
    m = Monitor(["n0"], 1)
    m.board.assign("n0", Assigned(0, (0,), (0,), 0))
    m.feed("n0", b"[ddptui:0:0]:x\n")
    m.board.worker_failed("n0", WorkerFailed(0, 1))
    events = m.board.assign("n0", Assigned(0, (0,), (0,), 1))
    assert events[0].state == RankState.ASSIGNED and m.board.all_cells()[0].restarts == 1


def test_a_node_whose_rank_failed_is_winding_down_and_a_healthy_one_is_not() -> None:
    """The session lets such a node finish printing torchrun's summary (the exit codes)
    instead of stopping it with the healthy nodes."""
    m = Monitor(["n0", "n1"], 2)
    _feed(m, "n0", "success_node0.log")
    assert not m.winding_down("n0") and not m.winding_down("n1")
    m.feed("n1", (DATA / "crash_node1.log").read_bytes())
    assert m.winding_down("n1") and not m.winding_down("n0")


def test_a_ranks_step_rate_comes_from_its_progress_lines() -> None:
    """The chosen rank's details show it; None until enough progress lines were seen."""
    m = Monitor(["n0"], 1)
    for second, epoch in ((100.0, 1), (101.0, 2)):
        m.feed("n0", f"[ddptui:0:0]:Epoch {epoch} | Batchsize: 32\n".encode(), now=second)
    assert m.step_rate("n0", 0, now=102.0) is None
    for second, epoch in ((102.0, 3), (103.0, 4)):
        m.feed("n0", f"[ddptui:0:0]:Epoch {epoch} | Batchsize: 32\n".encode(), now=second)
    assert m.step_rate("n0", 0, now=104.0) == pytest.approx(0.75)  # 3 epochs in 4 s
    assert m.step_rate("elsewhere", 0) is None


def test_the_monitor_reads_and_keeps_state_and_judges_nothing() -> None:
    """The same crash read by the monitor alone and by JobWatch (the monitor with its
    judges): the same ranks' states; only JobWatch names a culprit, orders the failures and
    calls a silent rank hung."""
    from ddptui.core.diagnose.job_watch import JobWatch
    from ddptui.core.events import FailureReport

    alone, judged = Monitor(["n0", "n1"], 2), JobWatch(["n0", "n1"], 2)
    said = {m: _feed(m, "n1", "crash_node1.log") for m in (alone, judged)}
    states = {m: [(c.rank, c.state) for c in m.board.all_cells()] for m in (alone, judged)}
    assert states[alone] == states[judged]
    reports = {m: [e for e in said[m] if isinstance(e, FailureReport)] for m in said}
    assert len(reports[alone]) == len(reports[judged]) == 2
    assert not any(r.failure.root_cause for r in reports[alone])  # as they came, none judged
    assert [r.rank for r in reports[judged][-1].ordered] == [3, 2]  # the culprit first
    assert alone.summary().culprit is None
    assert judged.summary().culprit is not None and judged.summary().culprit.rank == 3
    # two ranks print once and fall silent; an hour on, only the judges call them hung
    quiet = {m: Monitor(["n0"], 2) if m is alone else JobWatch(["n0"], 2) for m in said}
    for m in quiet.values():
        m.feed_lines("n0", ["[ddptui:0:0]: step 1", "[ddptui:1:1]: step 1"], now=1000.0)
        assert {c.state for c in m.board.all_cells()} == {RankState.RUNNING}
    hung = {
        m: [e for e in q.tick(4600.0, 60) if isinstance(e, RankChanged)] for m, q in quiet.items()
    }
    assert hung[alone] == []
    assert {e.state for e in hung[judged]} == {RankState.HUNG}
