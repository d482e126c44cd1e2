"""The failure story: each failure's cause, exactly one culprit, the order, the jump targets."""

from __future__ import annotations

import pytest

from ddptui.core.diagnose import failures as fx
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import Diagnosis, FailureRecord, RankChanged, RankState
from ddptui.core.monitor import causes
from ddptui.core.monitor import patterns as dx
from ddptui.core.monitor.agent_log import WorkerFailed


@pytest.mark.parametrize(
    ("exit_code", "error", "kinds", "cause"),
    [
        (1, "RuntimeError: boom", [dx.TRACEBACK], causes.EXCEPTION),
        (1, "torch.OutOfMemoryError: CUDA out of memory.", [dx.TRACEBACK], causes.OOM),
        (-6, "", [dx.COLLECTIVE_TIMEOUT], causes.WATCHDOG),
        (-15, "", [], causes.STOPPED),
        (
            1,
            "RuntimeError: [../gloo/pair.cc:534] Connection closed by peer [1.2.3.4]:1",
            [],
            causes.PEER,
        ),
        (1, "", [dx.PEER_LOST], causes.PEER),
        (-9, "", [], causes.KILLED),
        (3, "", [], causes.EXIT),
        (None, "", [], causes.AGENT_GONE),
    ],
)
def test_cause_of_a_failure(
    exit_code: int | None, error: str, kinds: list[str], cause: str
) -> None:
    assert causes.cause_of(exit_code, error, kinds) == cause


def test_teardown_outranks_what_the_rank_said() -> None:
    assert causes.cause_of(1, "Connection closed by peer", teardown=True) == causes.TEARDOWN
    assert (
        causes.is_victim(causes.TEARDOWN)
        and causes.is_victim(causes.STOPPED)
        and causes.is_victim(causes.PEER)
    )
    assert not causes.is_victim(causes.EXCEPTION) and not causes.is_victim(causes.KILLED)


def _record(node: str, rank: int, code: int, time: str, error: str = "", first: bool = False):
    return FailureRecord(node, rank, rank % 2, code, time=time, error=error, first_on_node=first)


def test_exactly_one_root_cause_the_first_failure_that_is_not_a_victim() -> None:
    """Over SSH each agent names its own first failure, and the SIGTERM'd victim may arrive
    first: the story still has one culprit, the crash, and the rest are victims by time."""
    records = [
        _record("n2", 4, -15, "2026-11-26_04:21:50", first=True),
        _record("n2", 5, -15, "2026-11-26_04:21:50"),
        _record("n1", 3, 1, "2026-11-26_04:21:49", "RuntimeError: boom", first=True),
        _record("n0", 0, 1, "2026-11-26_04:21:50", "Connection closed by peer", first=True),
    ]
    ordered = fx.order_failures(records)
    assert [r.rank for r in ordered] == [3, 4, 0, 5]
    assert [r.root_cause for r in ordered] == [True, False, False, False]
    assert [r.cause for r in ordered] == [
        causes.EXCEPTION,
        causes.STOPPED,
        causes.PEER,
        causes.STOPPED,
    ]


def test_only_victims_the_first_observed_is_the_culprit() -> None:
    records = [_record("n0", 0, -6, "2026-11-26_04:21:51"), _record("n0", 1, -15, "x")]
    ordered = fx.order_failures(records)
    assert ordered[0].root_cause and sum(r.root_cause for r in ordered) == 1


def test_culprit_of_failed_ranks_follows_observation_order() -> None:
    stopped = causes.FailedRank("n0", 0, 0, -15, "", causes.STOPPED, 1)
    crashed = causes.FailedRank("n1", 1, 3, 1, "RuntimeError", causes.EXCEPTION, 2)
    later = causes.FailedRank("n1", 0, 2, 1, "ValueError", causes.EXCEPTION, 3)
    assert fx.culprit([later, stopped, crashed]) is crashed
    assert fx.culprit([stopped]) is stopped
    assert fx.culprit([]) is None


def test_monitor_events_carry_the_ordered_failures() -> None:
    """Every failure event holds the story so far; the last one's order is the summary's."""
    m = JobWatch(["n0", "n1"], 2)
    a = m.failure_reported("n1", WorkerFailed(0, -15, 2, True, time="t1", from_summary=True))
    b = m.failure_reported("n0", WorkerFailed(1, 1, 1, True, time="t1", from_summary=True))
    assert not a[0].failure.root_cause  # a SIGTERM'd victim is never told as the culprit
    assert [r.rank for r in b[0].ordered] == [1, 2]
    assert [r.rank for r in m.summary().failures] == [1, 2]
    assert "ordered" not in b[0].to_dict()


def test_summary_names_the_culprit_and_each_rank_cause() -> None:
    m = JobWatch(["n0"], 2)
    m.board.worker_failed("n0", WorkerFailed(0, -15, 0), stopped=True)
    m.board.worker_failed("n0", WorkerFailed(1, 1, 1))
    told = m.summary()
    assert told.culprit is not None and told.culprit.rank == 1
    assert [(r.rank, r.cause, r.culprit) for r in told.ranks] == [
        (0, causes.STOPPED, False),
        (1, causes.EXIT, True),
    ]


def test_teardown_stops_are_no_failures_but_stopped_ranks_with_their_own_cause() -> None:
    m = JobWatch(["n0"], 2)
    m.board.worker_failed("n0", WorkerFailed(0, 1, 0))
    m.node_exited("n0", -15, by_teardown=True)
    told = m.summary()
    assert [(r.state, r.cause) for r in told.ranks] == [
        (RankState.FAILED, causes.EXIT),  # failed before the teardown: it stays failed
        (RankState.STOPPED, causes.TEARDOWN),
    ]
    assert told.culprit is not None and told.culprit.rank == 0


def test_a_rank_whose_collective_timed_out_keeps_that_cause_when_the_teardown_stops_it() -> None:
    m = JobWatch(["n0"], 2)
    cell = m.board.cell("n0", 0)
    assert cell is not None
    cell.diagnoses.append(Diagnosis(dx.COLLECTIVE_TIMEOUT, "collective 5 timed out"))
    m.node_exited("n0", -15, by_teardown=True)
    ends = [(r.state, r.cause) for r in m.summary().ranks]
    assert ends == [(RankState.STOPPED, causes.WATCHDOG), (RankState.STOPPED, causes.TEARDOWN)]
    assert not m.summary().failures  # stopped by the operator: still no failure of the job


def test_torchrun_failure_summary_at_teardown_records_no_failure() -> None:
    m = JobWatch(["n0"], 1)
    m.teardown_started()
    events = m.board.worker_failed("n0", WorkerFailed(0, -15, 0))
    events += m.failure_reported("n0", WorkerFailed(0, -15, 0))
    assert [e.state for e in events if isinstance(e, RankChanged)] == [RankState.STOPPED]
    assert not m.summary().failures


def _rank(node: str, lr: int, rank: int, *diagnoses: Diagnosis) -> RankChanged:
    return RankChanged(rank, node, lr, RankState.FAILED, 1, "", diagnoses)


def test_jump_targets_a_crash_not_yet_reported_by_its_agent_before_reported_victims() -> None:
    """Another node's agent reports its lost-peer ranks first; the crashed rank's own error
    line, seen but not yet a failure record, is still the first target."""
    ranks = {
        ("n0", 0): _rank("n0", 0, 2, Diagnosis(dx.TRACEBACK, "tb", "", 50, ts=3.0),
                         Diagnosis(dx.PEER_LOST, "lost", "", 58, ts=3.1)),
        ("n0", 1): _rank("n0", 1, 3, Diagnosis(dx.TRACEBACK, "tb", "", 40, ts=2.0),
                         Diagnosis(dx.PEER_LOST, "lost", "", 48, ts=2.1)),
        ("n1", 1): _rank("n1", 1, 1, Diagnosis(dx.TRACEBACK, "boom", "", 30, ts=2.5)),
    }  # fmt: skip
    failures = [
        FailureRecord("n0", 3, 1, 1, cause=causes.PEER),
        FailureRecord("n0", 2, 0, 1, cause=causes.PEER),
    ]
    targets = fx.jump_targets(ranks, failures)
    assert [(t.node, t.local_rank) for t in targets] == [("n1", 1), ("n0", 1), ("n0", 0)]


def test_jump_targets_culprit_first_then_other_ranks_by_time() -> None:
    ranks = {
        ("n0", 0): _rank("n0", 0, 0, Diagnosis(dx.PEER_LOST, "lost", "", 40, ts=2.0)),
        ("n0", 1): _rank("n0", 1, 1, Diagnosis(dx.TRACEBACK, "boom", "", 30, ts=1.0)),
        ("n1", 0): _rank("n1", 0, 2, Diagnosis(dx.HUNG, "hung", "", None)),
        ("n1", 1): _rank(
            "n1",
            1,
            3,
            Diagnosis(dx.STRAGGLER, "slow", "", 5, ts=0.5),
            Diagnosis(dx.EXITED, "exit", "", 12, ts=1.5),
        ),
    }
    failures = [FailureRecord("n0", 1, 1, 1, root_cause=True)]
    targets = fx.jump_targets(ranks, failures)
    assert [(t.node, t.local_rank, t.seq) for t in targets] == [
        ("n0", 1, 30),
        ("n1", 1, 12),
        ("n0", 0, 40),
    ]
