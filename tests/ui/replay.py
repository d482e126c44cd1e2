"""Replays captured torchrun output through the real Monitor into a console, with no live run.

The events are what a Session would emit for those logs (same Monitor), fed to the screen's
relay; timestamps, run id and paths are fixed, so snapshots do not depend on this machine.
"""

from __future__ import annotations

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import Event, NodeChanged, NodeState, RankState, RunPhase, StopReason
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.phase import RunPhaseWatch
from ddptui.core.story.incident import IncidentReport
from ddptui.core.story.story import Story
from ddptui.ui.screens.job import JobScreen
from tests.cases import TORCHRUN_CAPTURES as DATA

RUN_ID = "20261126-042126-f0093f"
RUN_DIR = f"/srv/ddptui/runs/{RUN_ID}"
T0 = 1_795_666_886.0  # 2026-11-26 04:21:26 UTC


def replay_events(
    logs: dict[str, str], exits: dict[str, int] | None, nproc: int = 2, upto: str = ""
) -> list[Event]:
    """What the monitor makes of each node's captured log, node after node, then the exits
    (None: the run goes on, no exits and no summary yet), each log cut before `upto`."""
    nodes = list(logs)
    monitor = JobWatch(nodes, nproc)
    events: list[Event] = [*monitor.initial_events()]
    for i, node in enumerate(nodes):
        events.append(NodeChanged(node, NodeState.RUNNING, ts=T0))
        data = (DATA / logs[node]).read_bytes()
        if upto and upto.encode() in data:  # the run so far: up to the first such line
            data = data[: data.index(upto.encode())]
        events += monitor.feed(node, data, now=T0 + i)
        if exits is not None:
            events += monitor.end_of_output(node)
    if exits is None:
        return Story(lambda: T0 + 10).retell(events)
    for node, code in exits.items():
        state = NodeState.EXITED if code == 0 else NodeState.FAILED
        events.append(NodeChanged(node, state, code, ts=T0 + 20))
        events += monitor.node_exited(node, code)
    told = monitor.summary()
    ranks = told.ranks
    ok = all(r.state == RankState.DONE for r in ranks)
    story = Story(lambda: T0 + 20)
    events = story.retell(events)
    final = None if ok else monitor.final_verdict(now=T0 + 20)
    if final is not None:
        events += story.retell([final])
    events += story.retell(story.ended())
    detail = story.told_first(ok, "" if ok else "rank 1 on local0 failed first (exit 1)")
    events.append(
        RunSummary(
            ok,
            len(ranks),
            ranks,
            RUN_DIR,
            RUN_ID,
            detail,
            stopped_by=StopReason.FINISHED if ok else StopReason.FAILURE,
            failures=told.failures,
            verdict=final.verdict if final else None,
            incidents=tuple(story.incidents),
            headline=detail.split("\n", 1)[0],
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


def running_events() -> list[Event]:
    """Two nodes of envcheck.py, every rank reported and still running."""
    logs = {"local0": "success_node0.log", "local1": "success_node1.log"}
    return replay_events(logs, None, upto=" done")


def feed(screen: JobScreen, events: list[Event]) -> None:
    """Hand the events to the screen as the session would (with the phases it decides from
    them), and show the lines now."""
    screen.outcome.reset(RUN_ID, RUN_DIR)
    screen.outcome.set_phase(RunPhase.RUNNING)
    phases = RunPhaseWatch()
    phases.phase = RunPhase.RUNNING
    screen.job_panel.fold(True)  # as a launch does
    if not any(isinstance(event, IncidentReport) for event in events):  # as the session tells
        events = Story(lambda: T0 + 10).retell(events)
    for event in events:
        if isinstance(event, RunSummary):  # the session says the last phase just before it
            ended = phases.ended(event)
            if ended is not None:
                screen.relay.emit(ended)
        screen.relay.emit(event)
        change = phases.seen(event)
        if change is not None:
            screen.relay.emit(change)
    screen._flush_logs()


async def first_rows_and_marks(
    events: list[Event], spec: JobSpec, size: tuple[int, int] = (80, 24)
) -> tuple[list[str], list[tuple[str, int | None]]]:
    """The root-cause panel's rows and the grid's marked cells (node, rank), the events fed
    to a console of `spec` at `size` (80x24: the smallest it is read at)."""
    from ddptui.ui.app import DdpApp  # the app imports this module's screens

    app = DdpApp(spec)
    async with app.run_test(size=size) as pilot:
        screen = app.job_screen
        assert isinstance(screen, JobScreen)
        feed(screen, events)
        await pilot.pause()
        assert screen.root_cause.has_class("-shown")
        rows = screen.root_cause.describe().plain.splitlines()
        cells = [screen.grid.cell(node, local) for node, local in screen.grid.states()]
        marked = [(c.node, c.rank) for c in cells if c is not None and c.blamed is not None]
        return rows, marked
