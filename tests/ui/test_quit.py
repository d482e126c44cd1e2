"""Quitting with a job running asks first: tear down then quit, detach, or cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.pilot import Pilot

from ddptui.core.events import RankState
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.process import SessionProcess
from ddptui.core.session.session import Session
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.confirm import ConfirmScreen, QuitScreen
from tests.cases import ROOT

from .conftest import (
    SIZE,
    job_screen,
    local_spec,
    tagged_pids,
    wait_for,
    wait_no_tagged_pids,
)

RUN_TIMEOUT = 180.0
NODES = ("local0", "local1")


async def test_quit_with_job_running_asks_then_tears_down() -> None:
    app = DdpApp(local_spec("--sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(pilot, lambda: screen.outcome.phase == "running", "the launch", RUN_TIMEOUT)
        assert screen.session is not None
        run_id = screen.session.run_id

        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), "the quit dialog")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "the dialog to close")
        assert screen.job_active
        assert app.is_running

        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), "the quit dialog")
        await pilot.press("t")
        await wait_for(pilot, lambda: app.return_value is not None, "the app to exit", RUN_TIMEOUT)
        assert screen.outcome.all_clean
    assert app.return_value == 1  # a torn-down run is not a successful run
    # what the terminal keeps once the screen clears: the run, each node's proof, the result
    kept = app.farewell.splitlines()
    assert kept[0].startswith(f"run {run_id}") and "torn down" in kept[0]
    assert any(line.strip().startswith("local0 ✓ clean") for line in kept), kept
    assert any(line.strip().startswith("local1 ✓ clean") for line in kept), kept
    assert any("■ torn down by the operator" in line for line in kept), kept
    assert wait_no_tagged_pids(run_id) == []


async def test_quit_and_detach_leaves_job_running_for_attach() -> None:
    spec = local_spec("--sleep", "60")
    app = DdpApp(spec)
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(
            pilot,
            lambda: all(s == RankState.RUNNING for s in screen.grid.states().values()),
            "every rank running",
            RUN_TIMEOUT,
        )
        assert screen.session is not None
        run_id = screen.session.run_id
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, QuitScreen), "the quit dialog")
        await pilot.press("d")
        await wait_for(pilot, lambda: app.return_value is not None, "the app to exit", RUN_TIMEOUT)
        for node in ("local0", "local1"):  # each log says why it stops where it stops
            pane = screen.logs.pane(node)
            assert pane is not None and pane.lines[-1].startswith("▸ detached: the job runs on")
            assert f"ddptui attach {run_id}" in pane.lines[-1]
    assert app.return_value == 0
    assert tagged_pids(run_id), "detach must leave the job running"

    # The console attaches to it again and tears it down from there.
    attached = DdpApp(spec, attach=RunDir.open(run_id))
    async with attached.run_test(size=SIZE) as pilot:
        screen = job_screen(attached)
        await wait_for(pilot, lambda: screen.outcome.phase == "running", "the attach", RUN_TIMEOUT)
        assert [c.node for c in screen.job_panel.commands] == ["local0", "local1"]
        await pilot.press("t")
        await wait_for(
            pilot, lambda: isinstance(attached.screen, ConfirmScreen), "the confirmation"
        )
        await pilot.press("y")
        await wait_for(pilot, lambda: not screen.job_active, "the teardown", RUN_TIMEOUT)
        assert screen.outcome.all_clean
    if pids := wait_no_tagged_pids(run_id):  # never leave a test's processes behind
        cleanup = Session(spec, lambda _e: None, run=RunDir.open(run_id))
        cleanup.request_teardown()
        await cleanup.run_job()
    assert pids == []


async def test_quit_once_the_summary_is_in_asks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between a run's summary and its session's end (history, goodput written) the run is
    over: `q` then leaves without asking how to stop a run that has stopped."""
    serve = SessionProcess.serve

    async def closing_slowly(self: SessionProcess) -> RunSummary:
        summary = await serve(self)
        await asyncio.sleep(3)  # a loaded machine: the session's process still closing
        return summary

    monkeypatch.setattr(SessionProcess, "serve", closing_slowly)
    app = DdpApp(local_spec("--sleep", "60"))
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(pilot, lambda: screen.outcome.phase == "running", "the launch", RUN_TIMEOUT)
        await _confirm_teardown(pilot, app)
        await wait_for(pilot, lambda: screen.summary is not None, "the summary", RUN_TIMEOUT)
        assert screen.job_active  # the session is still closing when `q` comes
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_value is not None, "the app to exit", RUN_TIMEOUT)
        assert not isinstance(app.screen, QuitScreen)
    assert app.return_value == 1


async def test_quit_while_the_teardown_runs_asks_nothing(tmp_path: Path) -> None:
    """The operator asked for the teardown; `q` before it is over (the ranks checkpoint for
    5 s on SIGTERM) waits for it, no question."""
    spec = make_spec(
        script=str(ROOT / "tests" / "data" / "graceful" / "worker.py"),
        script_args=("--ckpt-dir", str(tmp_path), "--stop-on", "TERM", "--handler-s", "5"),
        nodes=2, nproc_per_node=1, grace=30, hang_timeout=0,
    )  # fmt: skip
    app = DdpApp(spec)
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(
            pilot,
            lambda: all("step=2" in "\n".join(screen.logs.pane(n).lines) for n in NODES),
            "the ranks to step (their handlers in place)",
            RUN_TIMEOUT,
        )
        await _confirm_teardown(pilot, app)
        await wait_for(pilot, lambda: app.screen is screen, "the console again")
        await wait_for(pilot, lambda: (tmp_path / "rank0.start").exists(), "the checkpoints")
        assert screen.summary is None  # the teardown is under way
        await pilot.press("q")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, QuitScreen)
        await wait_for(pilot, lambda: app.return_value is not None, "the app to exit", RUN_TIMEOUT)
        assert screen.outcome.all_clean and screen.summary is not None
    assert app.return_value == (0 if screen.summary.ok else 1)  # as the summary says


async def _confirm_teardown(pilot: Pilot[int], app: DdpApp) -> None:
    """`t`, then yes to its question: the operator's teardown."""
    await pilot.press("t")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
    await pilot.press("y")
