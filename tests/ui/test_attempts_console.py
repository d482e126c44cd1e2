"""Launching the same job again on its job screen is another attempt of the same run: the
history lists the run once, with both attempts (real torchrun, the local backend)."""

from __future__ import annotations

from ddptui.core.runs.history import RunHistory
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.history import HistoryScreen

from .conftest import SIZE, job_screen, local_spec, wait_for, wait_no_tagged_pids
from .test_history_screen import table_rows


async def test_launch_again_on_the_same_job_screen_is_the_runs_next_attempt() -> None:
    app = DdpApp(local_spec(nodes=1, nproc_per_node=1))
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        run_ids = []
        for _ in range(2):
            await pilot.press("l")
            await wait_for(pilot, lambda: screen.job_active, "the launch")
            await wait_for(pilot, lambda: not screen.job_active, "the run to end", 180)
            assert screen.summary is not None and screen.summary.ok
            assert screen.session is not None
            run_ids.append(screen.session.run_id)
            assert wait_no_tagged_pids(run_ids[-1]) == []
        first, second = run_ids
        assert screen.session is not None and screen.session.run.attempt_of() == first

        (record,) = RunHistory().listing()
        assert record.id == first and record.status == "ok"
        assert [(a.index, a.cause, a.run_id) for a in record.attempts] == [
            (1, "launch", first),
            (2, "relaunch", second),
        ]
        assert [a.outcome for a in record.attempts] == ["ok", "ok"]

        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen), "the history")
        (row,) = table_rows(app.screen)  # type: ignore[arg-type]
        assert (row[0], row[6], row[7]) == (first, "ok", "2")
        detail = str(app.screen.query_one("#run-detail").render())
        assert "2 attempts:" in detail and f"#2 relaunch (relaunch of run {first})" in detail


async def test_a_restart_round_is_told_as_the_runs_next_attempt() -> None:
    spec = local_spec("--fail-rank", "1", nodes=1, nproc_per_node=2, max_restarts=1)
    app = DdpApp(spec)
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(pilot, lambda: screen.job_active, "the launch")
        await wait_for(pilot, lambda: not screen.job_active, "the run to end", 180)
        assert screen.session is not None
        assert wait_no_tagged_pids(screen.session.run_id) == []
        told = [n.message for n in screen.outcome.notices if n.message.startswith("attempt ")]
        assert len(told) == 1, told
        assert told[0].startswith("attempt 2 (restart) began; attempt 1 restarted: rank ")
        (record,) = RunHistory().listing()
        assert [a.cause for a in record.attempts] == ["launch", "restart"]
        assert record.attempts[-1].outcome == "failed"
