"""Real local runs (real torchrun, trainer/envcheck.py) driven through the console's keys."""

from __future__ import annotations

from ddptui.core.events import RankState
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.job import JobScreen

from .conftest import SIZE, job_screen, local_spec, tagged_pids, wait_for, wait_no_tagged_pids

RUN_TIMEOUT = 180.0


def _all(screen: JobScreen, state: RankState) -> bool:
    return all(s == state for s in screen.grid.states().values())


def _all_seen(screen: JobScreen, state: RankState) -> bool:
    cells = [screen.grid.cell(n, lr) for n, lr in screen.grid.states()]
    return all(c is not None and state in [s for _, s in c.history] for c in cells)


async def test_launch_runs_to_done_and_leaves_nothing_behind() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(pilot, lambda: screen.session is not None, "the session")
        assert screen.session is not None
        run_id = screen.session.run_id
        assert screen.check_action("launch", ()) is None  # no second launch while running

        await wait_for(
            pilot, lambda: _all_seen(screen, RankState.RUNNING), "every rank running", RUN_TIMEOUT
        )
        await wait_for(pilot, lambda: not screen.job_active, "the run to end", RUN_TIMEOUT)

        assert _all(screen, RankState.DONE), screen.grid.states()
        labels = sorted(
            c.label for n, lr in screen.grid.states() if (c := screen.grid.cell(n, lr)) is not None
        )
        assert labels == ["r0", "r1", "r2", "r3"]
        for cell in (screen.grid.cell(n, lr) for n, lr in screen.grid.states()):
            assert cell is not None
            assert [s for _, s in cell.history][-1] == RankState.DONE
            assert cell.exit_code == 0
            assert "✓" in cell.render()

        for node in ("local0", "local1"):
            pane = screen.logs.pane(node)
            assert pane is not None
            assert pane.lines_written > 0
            text = "\n".join(pane.lines)
            assert "allreduce=ok" in text
            assert "[r" in text
            assert "] envcheck host=" in text
        # the commands shown are now the ones that ran, with the real run id and port
        assert all(f"--rdzv_id={run_id}" in c.line for c in screen.job_panel.commands)
        assert all("<port>" not in c.line for c in screen.job_panel.commands)

        assert screen.summary is not None
        assert screen.summary.ok
        assert screen.outcome.phase == "finished"
        assert set(screen.outcome.reports) == {"local0", "local1"}
        assert screen.outcome.all_clean
        assert "✓ clean" in screen.outcome.describe().plain
        assert wait_no_tagged_pids(run_id) == []

        await pilot.press("q")
    assert app.return_value == 0


async def test_teardown_by_key_stops_every_process() -> None:
    app = DdpApp(local_spec("--sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(
            pilot, lambda: _all(screen, RankState.RUNNING), "every rank running", RUN_TIMEOUT
        )
        assert screen.session is not None
        run_id = screen.session.run_id
        assert tagged_pids(run_id), "the job's processes should be visible while it runs"

        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: not screen.job_active, "the teardown", RUN_TIMEOUT)

        assert set(screen.outcome.reports) == {"local0", "local1"}
        assert screen.outcome.all_clean, screen.outcome.reports
        assert screen.summary is not None
        assert not screen.summary.ok
        assert screen.outcome.phase == "torn down"
        assert "■ torn down by the operator — 0/4 ranks done" in screen.outcome.describe().plain
        assert wait_no_tagged_pids(run_id) == []
        assert screen.check_action("launch", ()) is True


async def test_teardown_dialog_can_be_cancelled() -> None:
    app = DdpApp(local_spec("--sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(pilot, lambda: screen.outcome.phase == "running", "the launch", RUN_TIMEOUT)
        await pilot.press("t")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("n")
        await pilot.pause(0.5)
        assert app.screen is screen
        assert screen.job_active
        screen.teardown()  # the same call the dialog's yes makes
        await wait_for(pilot, lambda: not screen.job_active, "the teardown", RUN_TIMEOUT)
        assert screen.session is not None
        assert wait_no_tagged_pids(screen.session.run_id) == []
