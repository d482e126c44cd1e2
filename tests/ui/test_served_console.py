"""The console a `ddptui serve` tab runs: the run followed from its directory, read-only."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable

from ddptui.core.events import RankState
from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.run_dir import RunDir
from ddptui.ui.app import FOLLOWER_HIDES, DdpApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.help import HelpScreen

from .conftest import SIZE


def _running_run(tmp_path: Path) -> RunDir:
    """A local 2x2 run's directory as its session leaves it while every rank runs."""
    spec = make_spec(backend="local", nodes=2, nproc_per_node=2, script="x.py")
    names = ["local0", "local1"]
    plan = build_plan(spec, [NodeTarget(n, "127.0.0.1") for n in names], "r1", 29400)
    run = RunDir.create("r1", root=tmp_path)
    run.write_spec(spec)
    run.write_plan(plan, {})
    for index, name in enumerate(names):
        first = 2 * index
        run.node_log(index, name).write_bytes(
            f"[ddptui:{first}:0]:step 1\n[ddptui:{first + 1}:1]:step 1\n".encode()
        )
    return run


async def _until(pilot: object, check: object, tries: int = 100) -> None:
    for _ in range(tries):
        if check():  # type: ignore[operator]
            return
        await pilot.pause(0.05)  # type: ignore[attr-defined]
    raise AssertionError("never happened")


async def test_a_followed_run_shows_and_offers_nothing_that_changes_it(tmp_path: Path) -> None:
    run = _running_run(tmp_path)
    app = DdpApp(run.read_spec(), attach=run, follow=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        await _until(
            pilot,
            lambda: (
                len(screen.ranks) == 4
                and all(e.state == RankState.RUNNING for e in screen.ranks.values())
            ),
        )
        assert screen.session is not None and app.job_screen.run.process is None

        footer = [b.binding for b in app.screen.active_bindings.values() if b.binding.show]
        shown = {b.action for b in footer}
        assert not shown & {"launch", "teardown", "detach", "take_stacks", "save_log"}
        assert {"Next log", "Quit"} <= {b.description for b in footer}
        titles = " ".join(c.title for c in app.get_system_commands(app.screen))
        for gone in ("Launch", "Tear down", "Detach", "Edit", "Preflight", "history"):
            assert gone not in titles, gone
        assert "Next node log" in titles

        await pilot.press("t", "d", "l", "S")  # the keys the console has for them: nothing
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        screen.action_save_log()  # asked anyway: nothing is written on the head node
        assert not (run.path / "saved").exists()
        screen.action_teardown()  # asked anyway (a remapped key, the palette): refused
        screen.teardown()
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and screen.run.stop_request is None

        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one(DataTable)
        ids = {str(table.get_row_at(i)[2]) for i in range(table.row_count)}
        assert not ids & FOLLOWER_HIDES and "logs.next" in ids
        await pilot.press("escape")

        await pilot.press("q")  # closes this console only: no question about the run
        await pilot.pause()
    assert app.return_code == 0
    assert not (run.path / "summary.json").exists()


async def test_a_refused_binding_says_the_console_is_read_only(tmp_path: Path) -> None:
    """`:job.teardown` typed on the command line of a followed run: refused, saying why."""
    run = _running_run(tmp_path)
    app = DdpApp(run.read_spec(), attach=run, follow=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        said: list[str] = []
        screen.notify = lambda message, **_: said.append(str(message))  # type: ignore[method-assign]
        await screen.run_binding("job.teardown")
        await pilot.pause()
        assert said == [
            "read-only: this console follows the run and cannot change it (job.teardown)"
        ]
        assert not isinstance(app.screen, ConfirmScreen) and screen.run.stop_request is None
