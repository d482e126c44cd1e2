"""The preemption drill from the console at 80x24, on a real local run of two pseudo-nodes:
its key asks first (No leaves the job running), Yes sends the stop signal to every rank, and
the drill's table shows over the console, whole, then the teardown's proof follows."""

from __future__ import annotations

from ddptui.core.job.spec import make_spec
from ddptui.core.runs.run_dir import RunDir
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.drill import DrillScreen
from tests.cases import ROOT

from .conftest import job_screen, wait_for, wait_no_tagged_pids

RUN_TIMEOUT = 240.0
WORKER = ROOT / "tests" / "data" / "graceful" / "worker.py"


async def test_the_drill_key_asks_then_shows_each_ranks_exit_at_80x24(tmp_path: object) -> None:
    spec = make_spec(
        script=str(WORKER),
        script_args=("--ckpt-dir", str(tmp_path), "--stop-on", "TERM"),  # no USR1 handler
        nodes=2,
        nproc_per_node=1,
        stop_signals=("USR1",),
        grace=10,
        hang_timeout=0,
    )
    app = DdpApp(spec)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = job_screen(app)
        assert screen.check_action("drill", ()) is None  # no job: not offered
        await pilot.press("l")
        await wait_for(
            pilot,
            lambda: len({r.rank for r in screen.ranks.values() if r.state == "running"}) == 2,
            "every rank running",
            RUN_TIMEOUT,
        )
        assert screen.session is not None
        run_id = screen.session.run_id
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        assert "Preemption drill" in str(app.screen.question)
        assert "SIGUSR1 goes to every rank" in str(app.screen.question)
        await pilot.press("n")  # no: nothing is sent
        await wait_for(pilot, lambda: app.screen is screen, "the console again")
        await pilot.pause(1.0)
        assert screen.job_active
        assert all(r.state == "running" for r in screen.ranks.values())
        await pilot.press("ctrl+t")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, DrillScreen), "the table", 120)
        drill = app.screen
        assert isinstance(drill, DrillScreen)
        await pilot.pause(0.2)
        text = str(drill.query_one("Static").render())
        rows = [line for line in text.splitlines() if line.startswith("local")]
        assert len(rows) == 2, text
        assert all("within grace" in row and row.endswith("-10 SIGUSR1") for row in rows), text
        assert "2 of 2 rank(s) exited within the 10 s grace" in " ".join(text.split())
        # the whole table is on the 80x24 screen: its box inside it, no line cut by the box
        box = drill.query_one("#drill-table").region
        assert box.right <= 80 and box.bottom <= 24, box
        assert max(len(line) for line in text.splitlines()) <= box.width - 4
        assert box.height - 2 >= len(text.splitlines()), (box, text)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "the console again")
        await wait_for(pilot, lambda: not screen.job_active, "the run to end", RUN_TIMEOUT)
        assert set(screen.outcome.reports) == {"local0", "local1"}
        assert screen.outcome.all_clean
        assert wait_no_tagged_pids(run_id) == []

    # a console following the run from its directory (`ddptui serve`'s) shows the table too
    run = RunDir.open(run_id)
    follower = DdpApp(run.read_spec(), attach=run, follow=True)
    async with follower.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(follower.screen, DrillScreen), "the table", 60)
        # pushed is not yet composed: its table is there once the screen has mounted it
        await wait_for(pilot, lambda: bool(follower.screen.query("Static")), "its text", 30)
        text = str(follower.screen.query_one("Static").render())
        assert "2 of 2 rank(s) exited within the 10 s grace" in " ".join(text.split())
