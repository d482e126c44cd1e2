"""The job's rhythm on screen at 80x24: the chosen rank's phase and its budget left in the rank
details, the job's quiet phase above the ranks, the step loop's budget once the phase ends."""

from __future__ import annotations

import re
import time

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import Event, NodeChanged, NodeState
from ddptui.core.monitor.agent_log import Assigned
from ddptui.ui.app import DdpApp

from .conftest import local_spec
from .replay import feed
from .screens import SMALL

NODES = ["local0", "local1"]


def _steps(m: JobWatch, start: float, count: int) -> list[Event]:
    events: list[Event] = []
    for n in range(count):
        for node in NODES:
            lines = [f"[ddptui:{2 * NODES.index(node) + r}:{r}]:step {n}" for r in (0, 1)]
            events += m.feed_lines(node, lines, now=start + n)
        events += m.tick(start + n + 0.5, 60.0)
    return events


def _checkpointing(now: float) -> tuple[JobWatch, list[Event]]:
    """Four ranks stepping each second, then rank 0 saying it saves, 40 s ago."""
    m = JobWatch(NODES, 2)
    events: list[Event] = list(m.initial_events())
    for i, node in enumerate(NODES):
        events.append(NodeChanged(node, NodeState.RUNNING, ts=now - 60))
        events += m.board.assign(node, Assigned(i, (0, 1), (2 * i, 2 * i + 1), 0), now=now - 60)
    events += _steps(m, now - 51, 10)
    events += m.feed_lines("local0", ["[ddptui:0:0]:saving checkpoint ckpt-10.pt"], now=now - 42)
    events += [e for t in range(1, 41) for e in m.tick(now - 42 + t, 60.0)]
    return m, events


async def test_a_quiet_phase_shows_with_its_budget_left_and_the_step_budget_after() -> None:
    now = time.time()
    m, events = _checkpointing(now)
    app = DdpApp(local_spec(nodes=2, nproc_per_node=2))
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        feed(screen, events)
        await pilot.pause()
        await pilot.click(screen.grid, offset=screen.grid.cell_offset("local1", 1))
        await pilot.pause()
        text = screen.details.render().plain  # type: ignore[union-attr]
        phase = next(line for line in text.splitlines() if line.startswith("phase: "))
        spent, left = _numbers(phase, "phase: checkpoint · {} s of its 300 s budget, {} s left")
        late = time.time() - now  # the app's start, on a loaded machine: seconds
        assert 41 <= spent <= 43 + late and spent + left == 300
        side = screen.query_one("#side")
        assert side.border_subtitle is not None
        said = re.match(r"checkpoint · (\d+) s", side.border_subtitle)
        assert said and 300 - 44 - late <= int(said.group(1)) <= 300 - 41, side.border_subtitle
        feed(screen, _steps(m, now, 3))  # the checkpoint is over: the step loop again
        await pilot.pause()
        text = screen.details.render().plain  # type: ignore[union-attr]
        assert "phase: step loop · budget 60 s (the floor; steps every 1.00 s)" in text
        assert not side.border_subtitle


def _numbers(line: str, form: str) -> tuple[float, float]:
    head, middle, tail = form.split("{}")
    assert line.startswith(head) and line.endswith(tail), line
    first, second = line[len(head) : len(line) - len(tail)].split(middle)
    return float(first), float(second)
