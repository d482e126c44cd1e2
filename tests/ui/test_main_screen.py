"""The console before launch: the job, the exact per-node commands, the grid and panes."""

from __future__ import annotations

from ddptui.core.events import RankState
from ddptui.ui.app import DdpApp
from ddptui.ui.widgets.job_panel import describe_commands, describe_job
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck

from .conftest import SIZE, job_screen, local_spec, wait_for


async def test_main_screen_shows_job_and_per_node_commands() -> None:
    spec = local_spec("--sleep", "5", nodes=3, nproc_per_node=2)
    app = DdpApp(spec)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = job_screen(app)
        facts = describe_job(spec).plain
        assert "profile local" in facts
        assert "backend local" in facts
        assert "3 node(s) × 2 process(es) per node = world size 6" in facts
        assert f"{spec.script} --sleep 5" in facts

        commands = screen.job_panel.commands
        assert [c.node for c in commands] == ["local0", "local1", "local2"]
        for command in commands:
            line = command.line
            assert "--nnodes=3" in line
            assert "--nproc_per_node=2" in line
            assert "--rdzv_backend=c10d" in line
            assert "--rdzv_endpoint=127.0.0.1:<port>" in line
            assert "--rdzv_id=<run-id>" in line
            assert "--local-addr=127.0.0.1" in line
            assert line.endswith(f"{spec.script} --sleep 5")
        shown = describe_commands(commands, "").plain
        assert "local2 $ cd " in shown

        assert set(screen.grid.states().values()) == {RankState.PENDING}
        assert len(screen.grid.states()) == 6
        assert screen.query_one(NodeLogDeck).nodes == ["local0", "local1", "local2"]
        assert not screen.job_active


async def test_footer_disables_teardown_until_launch() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = job_screen(app)
        assert screen.check_action("launch", ()) is True
        assert screen.check_action("teardown", ()) is None
        await pilot.press("t")  # nothing to tear down: no dialog
        assert app.screen is screen


async def test_quit_without_a_job_exits_at_once() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 0


async def test_log_panes_switch_by_key() -> None:
    app = DdpApp(local_spec(nodes=3))
    async with app.run_test(size=SIZE) as pilot:
        deck = app.screen.query_one(NodeLogDeck)
        assert deck.active_node == "local0"
        await pilot.press("right_square_bracket")
        assert deck.active_node == "local1"
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert deck.active_node is None  # the merged view of all nodes comes after the last
        assert deck.active_view is deck.merged_view
        await pilot.press("left_square_bracket")
        assert deck.active_node == "local2"
        await pilot.press("m")
        assert deck.active_view is deck.merged_view


async def test_launch_failure_is_reported_and_can_be_retried() -> None:
    app = DdpApp(local_spec().model_copy(update={"script": "/nonexistent/train.py"}))
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        for attempt in range(2):
            await pilot.press("l")
            await wait_for(pilot, lambda: screen.summary is not None, "the failed run", 60)
            await wait_for(pilot, lambda: not screen.job_active, "the session to end", 60)
            assert screen.outcome.phase == "failed", attempt
            text = screen.outcome.describe().plain
            assert "script not found: /nonexistent/train.py" in text
            assert "✗ not ok" in text
            assert set(screen.grid.states().values()) == {RankState.PENDING}
        await pilot.press("q")
    assert app.return_value == 1
