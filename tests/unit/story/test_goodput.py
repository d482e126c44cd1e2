"""Goodput: where a run's wall time went, from its events, in parts that always add up to it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.core.diagnose.speed import StragglerReport
from ddptui.core.diagnose.stall_events import QuietPhase, StallReport
from ddptui.core.diagnose.straggler import RankScore
from ddptui.core.events import (
    EVENT_KINDS,
    Event,
    MetricSampled,
    NodeChanged,
    NodeState,
    PhaseChanged,
    RankChanged,
    RankState,
    RunPhase,
)
from ddptui.core.monitor.cycles import CycleMember, CycleReport, RestartCycle
from ddptui.core.runs.event_log import decode_event, decode_record
from ddptui.core.story.goodput import (
    Goodput,
    GoodputAccount,
    GoodputReport,
    GoodputSplit,
    Part,
    bar_cells,
    lost_words,
)
from tests.cases import DATA

T0 = 1_000_000.0


def at(event: Event, t: float) -> Event:
    object.__setattr__(event, "ts", T0 + t)
    return event


def launched(t: float = 0.0, nodes: tuple[str, ...] = ("n0", "n1")) -> list[Event]:
    events: list[Event] = [at(PhaseChanged(RunPhase.LAUNCHING), t)]
    for node in nodes:
        events += [
            at(NodeChanged(node, NodeState.LAUNCHED), t),
            at(NodeChanged(node, NodeState.RUNNING), t),
        ]
    return events


def running(t: float, rank: int = 0) -> Event:
    return at(RankChanged(rank, "n0", rank, RankState.RUNNING), t)


def failed(t: float, rank: int = 1, restarts: int = 0) -> Event:
    """Rank `rank` failed in round `restarts` (its restarts so far, as the monitor counts)."""
    return at(RankChanged(rank, "n0", rank, RankState.FAILED, 1, restarts=restarts), t)


def restarting(t: float, rank: int = 0, restarts: int = 0) -> Event:
    return at(RankChanged(rank, "n0", rank, RankState.RESTARTING, restarts=restarts), t)


def step(t: float, n: int = 1) -> Event:
    return at(MetricSampled(0, n, {"loss": 1.0}), t)


def cycle(t: float, index: int, step_reached: int | None = None) -> Event:
    members = (CycleMember("n0", 0, (0, 1)),)
    return at(CycleReport(RestartCycle(index, T0 + t, 2, members, step_reached=step_reached)), t)


def exited(
    t: float, nodes: tuple[str, ...] = ("n0", "n1"), state: NodeState = NodeState.EXITED
) -> list[Event]:
    return [
        at(NodeChanged(node, state, 0 if state == NodeState.EXITED else 1), t) for node in nodes
    ]


def straggler(t: float, late_s: float, ranks: tuple[int, ...] = (1,)) -> Event:
    scores = tuple(
        RankScore(r, "n0", 0.7, 1.0, 1.0, 0.0, late_s if r in ranks else 0.0, r in ranks)
        for r in (0, 1)
    )
    return at(StragglerReport(ranks, (), scores, "arrival", ()), t)


def account(events: list[Event]) -> GoodputAccount:
    goodput = GoodputAccount()
    for event in events:
        goodput.seen(event)
    return goodput


def parts(goodput: Goodput) -> dict[str, float]:
    return {p.value: round(goodput.parts.seconds(p), 6) for p in Part if goodput.parts.seconds(p)}


def adds_up(goodput: Goodput) -> None:
    assert goodput.parts.total == pytest.approx(goodput.wall_s, abs=1e-6)
    assert all(goodput.parts.seconds(p) >= -1e-9 for p in Part)
    if goodput.attempts:
        total = sum(a.parts.total for a in goodput.attempts)
        assert total == pytest.approx(goodput.wall_s, abs=1e-6)
        assert goodput.attempts[0].began == goodput.began
        assert goodput.attempts[-1].ended == goodput.ended
        for before, after in zip(goodput.attempts, goodput.attempts[1:], strict=False):
            assert before.ended == after.began


def test_a_clean_run_is_launch_then_stepping_then_the_teardown() -> None:
    goodput = account([*launched(), running(3), step(5), step(30), *exited(50)])
    final = goodput.final(T0 + 52)
    assert parts(final) == {"launch": 5.0, "stepping": 45.0, "teardown": 2.0}
    assert final.fraction == pytest.approx(45 / 52)
    adds_up(final)


def test_a_job_that_prints_no_steps_steps_from_its_first_line() -> None:
    final = account([*launched(), running(3), *exited(20)]).final(T0 + 21)
    assert parts(final) == {"launch": 3.0, "stepping": 17.0, "teardown": 1.0}


def test_a_restart_round_is_its_own_attempt_and_its_wait_is_restart_time() -> None:
    events = [*launched(), running(3), step(5), failed(20), restarting(21), cycle(23, 1)]
    events += [running(24), step(26, 2), *exited(40)]
    final = account(events).final(T0 + 41)
    assert parts(final) == {"launch": 5.0, "stepping": 29.0, "restart": 6.0, "teardown": 1.0}
    first, second = final.attempts
    assert (first.began, first.ended, second.began) == (T0, T0 + 20, T0 + 20)
    assert first.parts == GoodputSplit(stepping=15.0, launch=5.0)
    assert second.parts == GoodputSplit(stepping=14.0, restart=6.0, teardown=1.0)
    adds_up(final)


def test_the_old_rounds_last_step_report_is_not_the_new_rounds_first_step() -> None:
    events = [*launched(), running(3), cycle(3, 0), cycle(6, 0, 4), failed(20), restarting(21)]
    events += [cycle(23, 0, 9), cycle(23, 1), running(24), cycle(27, 1, 1), *exited(40)]
    final = account(events).final(T0 + 40)
    assert final.attempts[1].parts.restart == pytest.approx(7.0)  # 20 -> 27, not 20 -> 23


def test_a_round_that_never_stepped_after_one_that_did_is_all_restart() -> None:
    events = [*launched(), running(3), step(5), failed(20), restarting(21), cycle(23, 1)]
    events += [running(24), failed(30, restarts=1)]
    final = account(events).final(T0 + 31)
    assert final.attempts[1].parts == GoodputSplit(restart=10.0, teardown=1.0)


def test_a_stray_metric_in_a_later_round_leaves_the_earlier_ones_as_they_were() -> None:
    """A job that prints no steps, whose second round's error lines read as a metric."""
    events = [*launched(), running(3), failed(10), restarting(10), cycle(12, 1), running(14)]
    events += [step(14.5), failed(16, restarts=1)]
    final = account(events).final(T0 + 17)
    assert final.attempts[0].parts == GoodputSplit(launch=3.0, stepping=7.0)
    assert final.attempts[1].parts == GoodputSplit(restart=4.5, stepping=1.5, teardown=1.0)


def test_a_failure_that_ends_the_run_is_its_teardown_from_the_failure_on() -> None:
    events = [*launched(), running(3), step(5), failed(20)]
    events += exited(22, state=NodeState.FAILED)
    final = account(events).final(T0 + 25)
    assert parts(final) == {"launch": 5.0, "stepping": 15.0, "teardown": 5.0}
    assert len(final.attempts) == 1


def test_a_stall_counts_from_the_last_progress_and_ends_when_a_rank_moves() -> None:
    events = [*launched(), running(3), step(5), at(StallReport(since_s=10.0), 20)]
    events += [at(StallReport(since_s=11.0), 21), running(25, 1), step(26, 2), *exited(40)]
    final = account(events).final(T0 + 40)
    assert parts(final) == {"launch": 5.0, "stepping": 20.0, "stalled": 15.0}


def test_a_stall_torn_down_is_stalled_until_the_teardown_began() -> None:
    events = [*launched(), running(3), step(5), at(StallReport(since_s=6.0), 12)]
    events += [
        at(PhaseChanged(RunPhase.TEARING_DOWN), 30),
        at(NodeChanged("n0", NodeState.STOPPING), 30.5),
    ]
    final = account(events).final(T0 + 33)
    assert parts(final) == {"launch": 5.0, "stepping": 1.0, "stalled": 24.0, "teardown": 3.0}


def test_a_straggler_costs_the_share_of_each_step_its_peers_wait() -> None:
    events = [*launched(), step(5), straggler(10, 0.25), straggler(30, 0.0, ranks=()), *exited(45)]
    final = account(events).final(T0 + 45)
    assert parts(final) == {"launch": 5.0, "stepping": 35.0, "straggler": 5.0}


def test_a_quiet_phase_is_its_own_part_and_an_open_one_runs_to_now() -> None:
    events = [*launched(), step(5), at(QuietPhase((0, 1), T0 + 10, None, "checkpoint"), 40)]
    goodput = account(events)
    live = goodput.split(T0 + 50)
    assert parts(live) == {"launch": 5.0, "stepping": 5.0, "phases": 40.0}
    goodput.seen(at(QuietPhase((0, 1), T0 + 10, T0 + 60, "checkpoint"), 60))
    goodput.seen(step(61, 2))
    final = goodput.final(T0 + 70)
    assert parts(final) == {"launch": 5.0, "stepping": 15.0, "phases": 50.0}


def test_a_stall_the_phase_watch_then_names_a_checkpoint_is_that_checkpoint() -> None:
    """Short steps: the step budget runs out before the checkpoint's cue is weighed; the quiet
    phase said a second later covers the stall's silence."""
    events = [*launched(), running(3), step(5), at(StallReport(since_s=4.7), 15.1)]
    events += [at(QuietPhase((0,), T0 + 10.4, None, "checkpoint", 20.0), 16.1)]
    events += [at(QuietPhase((0,), T0 + 10.4, T0 + 20.7, "checkpoint", 20.0), 20.7)]
    events += [running(20.7), step(21, 2), *exited(30)]
    final = account(events).final(T0 + 30)
    assert parts(final) == {"launch": 5.0, "stepping": 14.7, "phases": 10.3}


def test_a_checkpoint_past_its_budget_is_a_phase_for_its_budget_then_a_stall() -> None:
    events = [*launched(), step(5), at(QuietPhase((0,), T0 + 10, None, "checkpoint", 20.0), 11)]
    events += [at(StallReport(since_s=21.0), 31), at(PhaseChanged(RunPhase.TEARING_DOWN), 40)]
    final = account(events).final(T0 + 41)
    assert parts(final) == {"launch": 5.0, "stepping": 5.0, "phases": 20.0, "stalled": 10.0,
                            "teardown": 1.0}  # fmt: skip


def test_reports_come_on_a_change_of_part_and_on_drift_not_every_tick() -> None:
    goodput = GoodputAccount()
    said: list[GoodputReport] = []
    for event in [*launched(), running(3), step(5)]:
        said += goodput.seen(event)
    assert [r.current for r in said][-1] == Part.STEPPING
    before = len(said)
    for second in range(6, 600):
        said += goodput.tick(T0 + second)
        said += goodput.seen(step(second + 0.5, second))
    steady = said[before:]
    assert 0 < len(steady) < 30  # a few as the launch's share shrinks, not one a second
    for a, b in zip(steady, steady[1:], strict=False):
        assert b.ts - a.ts >= 5.0
    said_now = goodput.seen(at(StallReport(since_s=8.0), 600))
    assert [r.current for r in said_now] == [Part.STALLED]  # a new part: said at once


def test_the_report_and_the_split_read_back_from_their_json() -> None:
    events = [*launched(), running(3), step(5), failed(20), restarting(21), cycle(23, 1), step(26)]
    goodput = account(events)
    final = goodput.final(T0 + 30)
    assert Goodput.from_dict(json.loads(json.dumps(final.to_dict()))) == final
    report = GoodputReport(final, Part.STEPPING, ts=T0 + 30)
    line = report.to_json()
    assert json.loads(line)["goodput"]["goodput"] == round(final.fraction, 4)
    assert decode_event(line) == report


def test_the_bar_gives_each_part_its_share_of_the_cells() -> None:
    split = GoodputSplit(stepping=62.0, launch=20.0, restart=8.0, teardown=10.0)
    cells = bar_cells(split, 20)
    assert len(cells) == 20 and cells[0] == Part.STEPPING
    assert cells.count(Part.STEPPING) == 12 and cells.count(Part.LAUNCH) == 4
    assert lost_words(split) == "launch 20% · teardown 10% · restart 8%"
    assert bar_cells(GoodputSplit(), 10) == ()


# -- whatever comes, in whatever order, the parts add up ------------------------------------

_MAKERS = st.sampled_from(
    [
        lambda t: running(t),
        lambda t: failed(t),
        lambda t: restarting(t),
        lambda t: step(t),
        lambda t: cycle(t, 1),
        lambda t: cycle(t, 2, 3),
        lambda t: cycle(t, 0, 5),
        lambda t: at(StallReport(since_s=t / 3), t),
        lambda t: at(PhaseChanged(RunPhase.RUNNING), t),
        lambda t: at(PhaseChanged(RunPhase.TEARING_DOWN), t),
        lambda t: at(NodeChanged("n0", NodeState.RUNNING), t),
        lambda t: at(NodeChanged("n0", NodeState.EXITED, 0), t),
        lambda t: at(NodeChanged("n1", NodeState.STOPPING), t),
        lambda t: at(QuietPhase((0,), T0 + t / 2, None, budget_s=t % 7), t),
        lambda t: at(QuietPhase((0,), T0 + t / 2, T0 + t), t),
        lambda t: straggler(t, t % 1.7),
        lambda t: straggler(t, 0.0, ranks=()),
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_MAKERS, st.floats(0, 500, allow_nan=False)), max_size=40),
    st.floats(0, 100, allow_nan=False),
    st.lists(st.floats(0, 600, allow_nan=False), max_size=5),
)
def test_the_parts_always_add_up_to_the_wall_time(
    steps: list[tuple[object, float]], after: float, looks: list[float]
) -> None:
    goodput = GoodputAccount()
    goodput.seen(at(PhaseChanged(RunPhase.LAUNCHING), 0))
    for make, t in steps:
        for report in goodput.seen(make(t)):  # type: ignore[operator]
            adds_up(report.goodput)
    for look in looks:
        adds_up(goodput.split(T0 + look))
        for report in goodput.tick(T0 + look):
            adds_up(report.goodput)
    end = max([T0, *(T0 + t for _, t in steps)]) + after
    final = goodput.final(end)
    adds_up(final)
    assert final.wall_s == pytest.approx(max(end, goodput.now) - T0)


def test_a_console_following_the_run_reads_the_summarys_goodput_back() -> None:
    """`ddptui serve` and a read-only console follow the run's events.jsonl: the summary's
    split comes back whole, typed."""
    from ddptui.core.runs.summary import RunSummary

    events = [*launched(), running(3), step(5), failed(20), restarting(21), cycle(23, 1), step(26)]
    final = account(events).final(T0 + 30)
    summary = RunSummary(False, 2, (), "/tmp/run", "r1", goodput=final, ts=T0 + 30)
    back = decode_event(summary.to_json())
    assert isinstance(back, RunSummary) and back.goodput == final
    assert json.loads(summary.to_json())["goodput"]["attempts"][1]["parts"]["restart"] == 6.0


def test_an_attached_console_carries_the_detached_ones_account() -> None:
    """Detached at 41 after a restart, attached again at 100 (the logs read again from their
    first line: every earlier round told in an instant), a second restart at 120: one run from
    its launch, the unwatched time `detached`, the rounds kept as they were."""
    first = [*launched(), running(3), step(5), failed(20), restarting(21), cycle(23, 1)]
    first += [running(24), step(26, 2), at(PhaseChanged(RunPhase.DETACHING), 40)]
    before = account(first).final(T0 + 41)
    replayed = [*launched(100), running(100), step(100), failed(100), restarting(100)]
    replayed += [cycle(100, 1), running(100), step(100, 2)]
    later = [failed(120, restarts=1), restarting(121, restarts=1), cycle(124, 2), running(125)]
    later += [step(127, 3)]
    attached = GoodputAccount()
    attached.carry(Goodput.from_dict(json.loads(json.dumps(before.to_dict()))))
    for event in [*replayed, *later, *exited(150)]:
        attached.seen(event)
    final = attached.final(T0 + 151)
    adds_up(final)
    assert (final.began, final.wall_s) == (T0, 151.0)
    assert final.parts.seconds(Part.DETACHED) == pytest.approx(59.0)
    assert final.parts.seconds(Part.RESTART) == pytest.approx(6.0 + 7.0)
    assert [a.index for a in final.attempts] == [0, 1, 2]
    assert final.attempts[0] == before.attempts[0]
    assert (final.attempts[1].began, final.attempts[1].ended) == (T0 + 20, T0 + 120)
    assert final.attempts[1].parts.seconds(Part.DETACHED) == pytest.approx(59.0)
    assert final.attempts[2].began == T0 + 120


def test_a_console_that_never_detached_carries_nothing() -> None:
    goodput = account([*launched(), running(3), step(5), *exited(50)])
    assert goodput.final(T0 + 52).parts.seconds(Part.DETACHED) == 0.0


def test_a_restart_told_after_its_new_round_began_is_that_rounds_attempt() -> None:
    """Logs read back node by node (an attach, as the endurance run's second one): one node's
    restart and new round come before the other node's failure and restart of the old round
    (their `restarts`: 0). One restart is one attempt, and the new round's steps count."""
    events = [*launched(), running(3), step(5), restarting(20, rank=1), cycle(20, 1)]
    events += [failed(20.5, rank=0), restarting(20.5, rank=0), cycle(23, 1), running(24)]
    events += [step(26, 2), *exited(40)]
    final = account(events).final(T0 + 41)
    assert len(final.attempts) == 2
    assert parts(final) == {"launch": 5.0, "stepping": 29.0, "restart": 6.0, "teardown": 1.0}
    adds_up(final)
    live = [*launched(), running(3), step(5), failed(20, rank=0), restarting(20, rank=0)]
    live += [restarting(20, rank=1), cycle(23, 1), running(24), step(26, 2), *exited(40)]
    assert parts(account(live).final(T0 + 41)) == parts(final)  # as told live


def test_the_endurance_runs_second_attach_keeps_one_restart_and_its_steps() -> None:
    """The events of the endurance run's third console stretch (`bench/endurance/long_run.py`,
    attached after the worker's kill: the logs read back node by node), on the account the
    second stretch left. It had made a third attempt that waited for a round forever, 564 s
    of the run's 916 s counted as restart."""
    data = DATA / "long_run"
    before = json.loads((data / "attach2_before.json").read_text())
    attached = GoodputAccount()
    attached.carry(Goodput.from_dict(before["detached_goodput"]))
    for line in (data / "attach2_events.jsonl").read_text().splitlines():
        raw = json.loads(line)
        attached.seen(decode_record(EVENT_KINDS[raw["event"]], raw))
    final = attached.final(before["ended"])
    adds_up(final)
    assert len(final.attempts) == before["history_attempts"] == 2  # as history books it
    assert final.parts.seconds(Part.RESTART) < 30  # the restart: about 10 s
    assert final.parts.seconds(Part.STEPPING) > 200 and final.parts.seconds(Part.PHASES) > 500
