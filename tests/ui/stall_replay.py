"""Replays a captured stall (trainer/hang.py --skip-rank 1 on one node, two ranks, gloo) into
the console: the node's log and its collector's report, through the real Monitor."""

from __future__ import annotations

import json
from pathlib import Path

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import Event, NodeChanged, NodeState

DATA = Path(__file__).resolve().parents[1] / "data" / "stall"
T0 = 1_795_666_886.0  # 2026-11-26 04:21:26 UTC, as the other replays


def stall_events(monitor: JobWatch | None = None) -> list[Event]:
    """What the session would emit: the lines, the stall at once, then the stacks."""
    monitor = monitor or JobWatch(["local0"], 2)
    events: list[Event] = [*monitor.initial_events(), NodeChanged("local0", NodeState.RUNNING)]
    log = (DATA / "gloo_skip_node.log").read_bytes()
    end = log.index(b"\n", log.index(b"skips all_reduce")) + 1
    events += monitor.feed("local0", log[:end], now=T0)
    events += monitor.tick(T0 + 7, 6.0)
    report = json.loads((DATA / "gloo_skip_collect.json").read_text())
    events += monitor.stacks_taken({"local0": report}, now=T0 + 9)
    return events


def torn_down_events() -> list[Event]:
    """The stall, then the operator's teardown: the node stopped, its ranks with it."""
    monitor = JobWatch(["local0"], 2)
    events = stall_events(monitor)
    monitor.teardown_started()
    events.append(NodeChanged("local0", NodeState.STOPPED, -15))
    return events + monitor.node_exited("local0", -15, by_teardown=True)


def recorder_events() -> list[Event]:
    """The same job's dumps gathered alone, as a watchdog timeout gathers them (no stall)."""
    monitor = JobWatch(["local0"], 2)
    events: list[Event] = [*monitor.initial_events(), NodeChanged("local0", NodeState.RUNNING)]
    log = (DATA / "gloo_skip_node.log").read_bytes()
    end = log.index(b"\n", log.index(b"skips all_reduce")) + 1
    events += monitor.feed("local0", log[:end], now=T0)
    report = json.loads((DATA / "gloo_skip_collect.json").read_text())
    dumps_only = {"method": "none", "ranks": [], "fr": report["fr"]}
    return events + monitor.recorder_taken({"local0": dumps_only}, "watchdog", now=T0 + 9)


def deadlock_events() -> list[Event]:
    """trainer/hang.py --deadlock on 2 nodes x 2 ranks (gloo): stalled, then the stacks."""
    from ddptui.core.monitor.agent_log import Assigned

    monitor = JobWatch(["local0", "local1"], 2)
    events: list[Event] = [*monitor.initial_events()]
    for node, ranks in (("local0", (0, 1)), ("local1", (2, 3))):
        events.append(NodeChanged(node, NodeState.RUNNING))
        events += monitor.board.assign(node, Assigned(0, (0, 1), ranks, 0), now=T0)
        lines = [f"[ddptui:{r}:{lr}]:step=1" for lr, r in enumerate(ranks)]
        events += monitor.feed_lines(node, lines, now=T0)
    monitor.board.last_progress = T0
    events += monitor.tick(T0 + 7, 6.0)
    reports = json.loads((DATA / "gloo_deadlock_collect.json").read_text())
    return events + monitor.stacks_taken(reports, now=T0 + 9)
