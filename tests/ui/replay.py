"""Replays captured torchrun output through the real Monitor into a console, with no live run.

The events are what a Session would emit for those logs (same Monitor), fed to the screen's
relay; timestamps, run id and paths are fixed, so snapshots do not depend on this machine.
"""

from __future__ import annotations

from ddptui.core.events import (
    Event,
    NodeChanged,
    NodeState,
    RankState,
    RunSummary,
)
from ddptui.core.monitor.monitor import Monitor
from ddptui.ui.screens.job import JobScreen
from tests.cases import TORCHRUN_CAPTURES as DATA

RUN_ID = "20261126-042126-f0093f"
RUN_DIR = f"/srv/ddptui/runs/{RUN_ID}"
T0 = 1_795_666_886.0  # 2026-11-26 04:21:26 UTC


def replay_events(logs: dict[str, str], exits: dict[str, int], nproc: int = 2) -> list[Event]:
    """What the monitor makes of each node's captured log, node after node, then the exits."""
    nodes = list(logs)
    monitor = Monitor(nodes, nproc)
    events: list[Event] = [*monitor.initial_events()]
    for i, node in enumerate(nodes):
        events.append(NodeChanged(node, NodeState.RUNNING, ts=T0))
        events += monitor.feed(node, (DATA / logs[node]).read_bytes(), now=T0 + i)
        events += monitor.end_of_output(node)
    for node, code in exits.items():
        state = NodeState.EXITED if code == 0 else NodeState.FAILED
        events.append(NodeChanged(node, state, code, ts=T0 + 20))
        events += monitor.node_exited(node, code)
    told = monitor.summary()
    ranks = told.ranks
    ok = all(r.state == RankState.DONE for r in ranks)
    events.append(
        RunSummary(
            ok,
            len(ranks),
            ranks,
            RUN_DIR,
            RUN_ID,
            "" if ok else "rank 1 on local0 failed first (exit 1)",
            stopped_by="finished" if ok else "failure",
            failures=told.failures,
            ts=T0 + 21,
        )
    )
    return events


def crash_events() -> list[Event]:
    """envcheck.py --fail-rank 1 on two local nodes (torchrun error files written)."""
    return replay_events(
        {"local0": "errfile_crash_node0.log", "local1": "errfile_crash_node1.log"},
        {"local0": 1, "local1": 1},
    )


def feed(screen: JobScreen, events: list[Event]) -> None:
    """Hand the events to the screen as the session would, and show the lines now."""
    screen.outcome.reset(RUN_ID, RUN_DIR)
    screen.outcome.set_phase("running")
    for event in events:
        screen.relay.emit(event)
    screen._flush_logs()
