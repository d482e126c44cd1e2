"""A stalled run: amber ranks, the suspect on the grid, the stack groups, a rank's whole stack."""

from __future__ import annotations

from typing import Any

import pytest

from ddptui.core.events import PhaseChanged, RankChanged, RankState, RunPhase
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.rank_stack import RankStackScreen
from ddptui.ui.widgets.stack_groups import StackGroupsPanel

from .conftest import SIZE, local_spec
from .replay import feed
from .stall_replay import T0, deadlock_events, recorder_events, stall_events, torn_down_events


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StackGroupsPanel, "now", staticmethod(lambda: T0 + 42))


async def test_stalled_grid_and_stack_groups() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, stall_events())
        await pilot.pause()
        suspect, waiting = screen.grid.cell("local0", 1), screen.grid.cell("local0", 0)
        assert suspect is not None and waiting is not None
        # the story's lead blames it: the grid says its kind (the stacks panel its suspicion)
        assert (suspect.look, suspect.render(), suspect.glyph) == ("hung", "r1 ◆hang", "◆")
        assert waiting.look == "hung"
        assert screen.outcome.phase.startswith("stalled")
        assert screen.stacks.has_class("-shown")
        text = screen.stacks.describe().plain
        assert text.startswith(
            "Stalled · no rank progressed for 42 s\nStacks · faulthandler-signal"
        )
        lines = text.splitlines()
        assert lines[2].startswith("‼ suspect    1 rank: time.sleep(3600) <- sleep_forever")
        assert lines[3].strip().startswith("1 rank: all_reduce <- main (hang.py:")
        assert "flight recorder: rank 1 never entered collective 5 (gloo:all_reduce" in text
        await pilot.press("K")  # no rank chosen: the first suspect's whole stack
        await pilot.pause()
        assert isinstance(app.screen, RankStackScreen)
        assert app.screen.title_text.startswith("rank 1 · local0 local rank 1")
        assert "hang.py:28 in sleep_forever" in app.screen.text
        await pilot.press("escape")
        await pilot.pause()
        await pilot.click(screen.grid, offset=screen.grid.cell_offset("local0", 0))
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, RankStackScreen)
        assert " in all_reduce" in app.screen.text


async def test_progress_again_clears_the_stall() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        events = stall_events()
        feed(screen, events)
        await pilot.pause()
        progress = RankChanged(0, "local0", 0, RankState.RUNNING)
        feed(screen, [progress, PhaseChanged(RunPhase.RUNNING)])  # as the session decides
        await pilot.pause()
        assert screen.stacks.stalled_since is None
        assert not screen.stacks.describe().plain.startswith("Stalled")


async def test_teardown_of_a_stalled_run_shows_stopped_ranks_not_failures() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, torn_down_events())
        await pilot.pause()
        suspect, waiting = screen.grid.cell("local0", 1), screen.grid.cell("local0", 0)
        assert suspect is not None and waiting is not None
        assert (waiting.look, waiting.render()) == ("stopped", "r0 ■")
        assert (suspect.look, suspect.render()) == ("stopped", "r1 ■◆")  # stopped, blamed
        assert screen.grid.counts()["stopped"] == 2 and "failed" not in screen.grid.counts()
        assert "✗" not in "".join(span.text for line in screen.grid.lines for span in line)
        assert not screen.root_cause.failures
        since = screen.stacks.stalled_since
        assert since is not None
        feed(screen, [PhaseChanged(RunPhase.TORN_DOWN, ts=since + 50)])  # the run ended
        await pilot.pause()
        said = screen.stacks.describe().plain
        assert "‼ suspect    1 rank: time.sleep(3600)" in said
        # the stall is over with the run: its clock stopped when the run ended
        assert said.splitlines()[0] == "Stalled · no rank progressed for 50 s until the run ended"
        screen.stacks.now = lambda: 10**10  # type: ignore[method-assign]
        assert screen.stacks.describe().plain.splitlines()[0] == said.splitlines()[0]


async def test_flight_recorder_gathered_alone_is_told_in_the_root_cause_panel() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, recorder_events())
        await pilot.pause()
        assert screen.root_cause.has_class("-shown")
        text = screen.root_cause.describe().plain
        assert text.startswith("▶ hang: rank 1 on local0\n  initiating\n  rank 1 never entered")
        assert "\nFlight recorder · at the watchdog timeout, 2 rank(s)' dumps\n" in text
        assert "rank 1 never entered collective 5 (gloo:all_reduce [1048576]) of group 0" in text
        assert "ranks 0 wait in collective 5 (gloo:all_reduce) of group 0" in text
        cell = screen.grid.cell("local0", 1)
        assert cell is not None and cell.suspect and "never entered" in cell.tooltip


async def test_a_deadlock_names_both_groups_with_their_collectives() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, deadlock_events())
        await pilot.pause()
        lines = screen.stacks.describe().plain.splitlines()
        assert lines[2] == "Deadlock · the groups wait on each other in different collectives"
        assert lines[3].startswith("‼ deadlock  2 ranks: all_reduce <- main (hang.py:")
        assert "· in collective 4 (gloo:all_reduce) of group 0  [0, 1]" in lines[3]
        assert "· in collective 1 (gloo:all_reduce) of group 1  [2, 3]" in lines[4]
        cells = [screen.grid.cell(n, lr) for n in ("local0", "local1") for lr in (0, 1)]
        assert all(c is not None and c.suspect for c in cells)


def test_stalled_run_snapshot(snap_compare: Any) -> None:
    from .test_snapshots import fixed_app, settle

    async def stalled(pilot: Any) -> None:
        feed(pilot.app.job_screen, stall_events())
        await settle(pilot)

    assert snap_compare(fixed_app(), run_before=stalled, terminal_size=SIZE)
