"""The restart story from real elastic torchrun output (tests/data/torchrun/README.md says how
each capture was made): rounds, their causes and members, the storm and no-progress alarms."""

from __future__ import annotations

import re

from ddptui.core.events import Event, RankChanged, RankState
from ddptui.core.monitor.agent_log import Assigned, WorkerFailed
from ddptui.core.monitor.cycles import (
    CycleReport,
    CycleWatch,
    MembershipChange,
    RestartAlarm,
)
from ddptui.core.monitor.monitor import Monitor
from tests.cases import TORCHRUN_CAPTURES as DATA

LONG_RUN = DATA.parent / "long_run"

_STAMP = re.compile(rb"^[IWEF]\d{4} (\d\d):(\d\d):(\d\d\.\d+) ")


def timed_lines(name: str) -> list[tuple[float, bytes]]:
    """A node's log as (seconds, line): a worker's line takes its agent's last timestamp."""
    now, out = 0.0, []
    for line in (DATA / name).read_bytes().splitlines(keepends=True):
        stamp = _STAMP.match(line)
        if stamp:
            h, m, s = stamp.groups()
            now = int(h) * 3600 + int(m) * 60 + float(s)
        out.append((now, line))
    return out


def replay(logs: dict[str, str], max_restarts: int = 3) -> tuple[Monitor, list[Event]]:
    """Every node's lines fed in the order their agents logged them, as they arrived live."""
    monitor = Monitor(list(logs), 1, max_restarts=max_restarts)
    merged = sorted(
        ((ts, index, node, line) for node, name in logs.items()
         for index, (ts, line) in enumerate(timed_lines(name))),
        key=lambda item: (item[0], item[2], item[1]),
    )  # fmt: skip
    events: list[Event] = []
    for ts, _, node, line in merged:
        events += monitor.feed(node, line, now=ts)
    for node in logs:
        events += monitor.end_of_output(node)
    return monitor, events


LOST = {f"n{i}": f"elastic_lost_node{i}.log" for i in range(3)}


def test_a_lost_node_starts_a_second_round_of_two_nodes() -> None:
    monitor, events = replay(LOST)
    monitor.node_exited("n2", -15)  # its agent was stopped: the session tells the monitor
    cycles = monitor.cycles.final()
    assert [c.index for c in cycles] == [0, 1]
    first, second = cycles
    assert first.nodes == ("n1", "n0", "n2") or set(first.nodes) == {"n0", "n1", "n2"}
    assert first.world_size == 3 and first.cause == "start"
    assert set(second.nodes) == {"n0", "n1"} and second.world_size == 2
    assert second.restarts == 1 and second.max_restarts == 3
    assert second.step_before == 6  # round 0 reached step 6 before node2 left
    assert "failed" in second.cause  # the survivors' workers failed when their peer went
    reports = [e for e in events if isinstance(e, CycleReport)]
    assert {r.cycle.index for r in reports} == {0, 1}
    assert not [e for e in events if isinstance(e, RestartAlarm)]


def test_the_lost_node_is_the_cause_when_the_session_says_so_first() -> None:
    """The session learns a node was lost (its agent's exit) before the next round: the node,
    not its peers' broken connections, is why the round began."""
    watch = CycleWatch(max_restarts=3)
    watch.assigned("a", Assigned(0, (0,), (0,), 0, 2, "h:1"), 10.0)
    watch.assigned("b", Assigned(1, (0,), (1,), 0, 2, "h:1"), 10.1)
    watch.step(7)
    watch.node_left("b", MembershipChange.KILLED, None)
    watch.worker_failed("a", WorkerFailed(0, 1, 0))
    events = watch.assigned("a", Assigned(0, (0,), (0,), 1, 1, "h:2"), 20.0)
    cycle = watch.final()[-1]
    assert cycle.cause == "node b agent killed by the operator (fault injection)"
    assert cycle.failed_node == "b" and cycle.nodes == ("a",) and cycle.step_before == 7
    assert any(isinstance(e, CycleReport) and e.cycle.index == 0 for e in events)


def test_a_node_lost_with_no_exit_is_told_by_who_said_so() -> None:
    """No exit came from a lost node: its connection went, unless its scheduler said so."""
    causes = []
    for how in ("", "srun: error: Node failure on b"):
        watch = CycleWatch(max_restarts=3)
        watch.assigned("a", Assigned(0, (0,), (0,), 0, 2, "h:1"), 10.0)
        watch.assigned("b", Assigned(1, (0,), (1,), 0, 2, "h:1"), 10.1)
        watch.node_left("b", MembershipChange.LOST, None, how)
        watch.assigned("a", Assigned(0, (0,), (0,), 1, 1, "h:2"), 20.0)
        causes.append(watch.final()[-1].cause)
    assert causes == [
        "node b lost (its connection: no exit code came)",
        "node b lost (srun: error: Node failure on b)",
    ]


def test_ranks_renumbered_by_a_new_round_are_followed() -> None:
    monitor = Monitor(["a", "b"], 1)
    monitor.board.assign("b", Assigned(1, (0,), (1,), 0, 2, "h:1"))
    events = monitor.board.assign("b", Assigned(0, (0,), (0,), 0, 1, "h:2"))
    changed = [e for e in events if isinstance(e, RankChanged)]
    assert changed and changed[0].rank == 0 and "rank 1 is now rank 0" in changed[0].detail


STORM = {f"n{i}": f"elastic_storm_node{i}.log" for i in range(2)}


def test_a_rank_that_dies_every_attempt_is_a_storm_without_progress() -> None:
    monitor, events = replay(STORM)
    cycles = monitor.cycles.final()
    assert len(cycles) == 4  # the first attempt and three restarts, all spent
    assert [c.restarts for c in cycles] == [0, 1, 2, 3]
    assert [c.cause for c in cycles[1:]] == ["rank 1 on n1 failed (SIGKILL)"] * 3
    assert [c.failed_rank for c in cycles[1:]] == [1, 1, 1]
    assert [c.step_before for c in cycles[1:]] == [3, 3, 3]
    alarms = [e for e in events if isinstance(e, RestartAlarm)]
    kinds = [a.alarm for a in alarms]
    assert "storm" in kinds and "no_progress" in kinds
    storm = next(a for a in alarms if a.alarm == "storm")
    assert "3 restart cycles" in storm.detail and "3 of 3 restarts used" in storm.detail


def test_a_round_that_steps_further_raises_no_alarm() -> None:
    watch = CycleWatch(max_restarts=5, storm_restarts=10)
    master = iter(range(100))
    events: list[Event] = []
    for index, best in enumerate((5, 9, 14)):
        events += watch.assigned("a", Assigned(0, (0,), (0,), index, 1, f"h:{next(master)}"), 1.0)
        watch.step(best)
    events += watch.assigned("a", Assigned(0, (0,), (0,), 3, 1, "h:99"), 2.0)
    assert not [e for e in events if isinstance(e, RestartAlarm)]
    watch.step(3)  # round 3 gets no further than round 2 ...
    alarm = watch.assigned("a", Assigned(0, (0,), (0,), 4, 1, "h:100"), 3.0)
    assert [e.alarm for e in alarm if isinstance(e, RestartAlarm)] == ["no_progress"]


def test_the_current_rounds_steps_are_told_as_they_move_not_every_tick() -> None:
    watch = CycleWatch(max_restarts=1)
    watch.assigned("a", Assigned(0, (0,), (0,), 0, 1, "h:1"), 0.0)
    watch.step(3)
    told = watch.tick(10.0)
    assert [e.cycle.step_reached for e in told if isinstance(e, CycleReport)] == [3]
    watch.step(9)
    assert watch.tick(12.0) == []  # too soon after the last report
    assert [e.cycle.step_reached for e in watch.tick(16.0) if isinstance(e, CycleReport)] == [9]
    assert watch.tick(30.0) == []  # nothing moved since


def test_every_rank_restarted_with_its_group_counts_the_restart() -> None:
    """torchrun counts a restart only on the agent whose worker failed (node1 logs
    restart_count 1, 2, 3); node0's agent logs 0 each round, yet its rank restarted each time."""
    monitor, events = replay(STORM)
    restarts = {(e.node, e.local_rank): e.restarts for e in events if isinstance(e, RankChanged)}
    assert restarts == {("n0", 0): 3, ("n1", 0): 3}
    summary = {(r.node, r.local_rank): r.restarts for r in monitor.summary().ranks}
    assert summary == {("n0", 0): 3, ("n1", 0): 3}


def test_ranks_waiting_for_the_next_round_are_restarting_not_failed() -> None:
    """Between an agent's "will restart worker group" and the next round's result, its ranks
    wait (44 s in the capture): restarting, the failed one's exit kept in its history."""
    _, events = replay(STORM)
    ranks = [e for e in events if isinstance(e, RankChanged)]
    for node in ("n0", "n1"):
        states = [e.state for e in ranks if e.node == node]
        waits = [i for i, s in enumerate(states) if s == RankState.RESTARTING]
        assert len(waits) >= 3, (node, states)  # once a round, for each of the three restarts
        for i in waits:  # each wait ends in the next round (or the run's end), never in a ✗
            later = [s for s in states[i + 1 :] if s != RankState.RESTARTING]
            assert not later or later[0] == RankState.ASSIGNED, (node, states)
    said = [e.detail for e in ranks if e.node == "n1" and e.state == RankState.RESTARTING]
    assert said[0] == "restarting (3/3 attempts left)"


def test_a_replayed_run_read_node_by_node_has_the_rounds_it_had_live() -> None:
    """Attaching reads each node's whole log in turn: one node's second round comes before the
    other node's first. A 2x2 job whose rank 1 was SIGKILLed once (a real run's logs,
    tests/data/long_run) had two rounds, the second caused by that kill, in either order."""
    logs = {n: (LONG_RUN / f"{n}.log").read_bytes() for n in ("local0", "local1")}
    for order in (["local0", "local1"], ["local1", "local0"]):
        monitor = Monitor(list(logs), 2)
        for node in order:
            monitor.feed(node, logs[node])
            monitor.end_of_output(node)
        cycles = monitor.summary().cycles
        assert [sorted(c.nodes) for c in cycles] == [["local0", "local1"]] * 2, cycles
        assert [c.world_size for c in cycles] == [4, 4]
        assert cycles[1].cause == "rank 1 on local1 failed (SIGKILL)", (order, cycles[1])
        assert cycles[1].failed_node == "local1" and cycles[1].failed_rank == 1
