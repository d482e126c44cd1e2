"""Run history in the console: the list, a past run's grid and logs, relaunch, and a run whose
console was killed with SIGKILL mid-run (recorded as interrupted, its logs still readable)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from ddptui.core.events import RankChanged, RankState, RankSummary
from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.profiles import bundled_trainer
from ddptui.core.job.spec import JobSpec, make_spec
from ddptui.core.runs.attempts import Attempt, AttemptCause
from ddptui.core.runs.history import RunHistory
from ddptui.core.runs.history_rows import HISTORY_COLUMNS
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.history import HistoryScreen
from ddptui.ui.screens.past_run import PastRunScreen
from ddptui.ui.widgets.logs.log_tabs import LogTabBar
from tests.cases import ROOT

from .conftest import SIZE, job_screen, local_spec, tagged_pids, wait_for, wait_no_tagged_pids
from .screen_host import ScreenHost

T0 = 1767225600.0  # 2026-01-01 00:00:00 UTC
RANKS = HISTORY_COLUMNS.index("RANKS")


def fake_run(
    run_id: str,
    spec: JobSpec,
    history: RunHistory,
    started: float,
    outcome: str,
    failed_rank: int | None = None,
    root: Path | None = None,
) -> RunDir:
    """A run directory as a session leaves it (spec, plan, events, node logs) and its row."""
    run = RunDir.create(run_id, root)
    run.write_spec(spec)
    nodes = [NodeTarget(f"local{i}", "127.0.0.1") for i in range(spec.nodes)]
    plan = build_plan(spec, nodes, run_id, 29400)
    run.write_plan(plan, {"backend": "local"})
    ranks = []
    for rank in range(spec.world_size):
        node, local = f"local{rank // spec.nproc_per_node}", rank % spec.nproc_per_node
        state = RankState.FAILED if rank == failed_rank else RankState.DONE
        code = 1 if rank == failed_rank else 0
        run.record(RankChanged(rank, node, local, RankState.RUNNING))
        if outcome != "interrupted":
            run.record(RankChanged(rank, node, local, state, code))
        ranks.append(RankSummary(rank, node, local, state, code))
    run.close()
    for i, node in enumerate(plan.node_names):
        lines = [f"[ddptui:{r}:{r % 2}]:hello from rank {r}\n" for r in (2 * i, 2 * i + 1)]
        run.node_log(i, node).write_text("agent line\n" + "".join(lines))
    history.started(run, spec, started=started)
    if outcome == "interrupted":
        history.update(run_id, console_pid=None)
    else:
        ok = outcome == "ok"
        summary = RunSummary(ok, spec.world_size, tuple(ranks), str(run.path), run_id)
        history.finished(summary, ended=started + 42)
    return run


@pytest.fixture
def three_runs(state_dir: Path) -> list[str]:
    history = RunHistory()
    spec = make_spec(script=bundled_trainer(), nodes=1, nproc_per_node=1)
    fake_run("20260101-000000-aaaaaa", spec, history, T0, "ok")
    wide = make_spec(script=bundled_trainer(), nodes=2, nproc_per_node=2, profile="elastic-ddp")
    fake_run("20260101-001000-bbbbbb", wide, history, T0 + 600, "failed", failed_rank=2)
    fake_run("20260101-002000-cccccc", wide, history, T0 + 1200, "interrupted")
    return ["20260101-002000-cccccc", "20260101-001000-bbbbbb", "20260101-000000-aaaaaa"]


def table_rows(screen: HistoryScreen) -> list[list[str]]:
    table = screen.query_one(DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_history_lists_opens_and_relaunches(three_runs: list[str]) -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen), "the history")
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        rows = table_rows(screen)
        assert [r[0] for r in rows] == three_runs
        assert [r[6] for r in rows] == ["interrupted", "failed", "ok"]
        assert rows[1][RANKS] == "3/4 done, r2 failed (exit 1)" and rows[2][RANKS] == "1/1 done"
        assert [r[7] for r in rows] == ["1", "1", "1"]  # each ran once
        assert rows[1][3] == "elastic-ddp"

        await pilot.press("down", "enter")  # the failed run
        await wait_for(pilot, lambda: isinstance(app.screen, PastRunScreen), "the past run")
        past = app.screen
        assert isinstance(past, PastRunScreen)
        await wait_for(pilot, lambda: past.logs.loaded, "its logs")
        assert past.grid.states()[("local1", 0)] == RankState.FAILED
        assert past.grid.states()[("local0", 1)] == RankState.DONE
        assert "[r0] hello from rank 0" in past.logs.text("local0")
        assert "agent line" in past.logs.text("local0")
        await pilot.press("right_square_bracket")
        assert past.logs.active_node == "local1"
        assert "[r3] hello from rank 3" in past.logs.text("local1")
        bar = past.logs.query_one(LogTabBar)
        first = bar.span_of(0)
        assert first is not None and bar.active == 1
        await pilot.click("#past-log-tabs", offset=(first.start + 1, 0))  # its tab, clicked
        await pilot.pause()
        assert past.logs.active_node == "local0" and bar.active == 0
        assert [view.display for view in past.logs.views.values()] == [True, False]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen, "back to the list")

        await pilot.press("down", "r")  # relaunch the 1 x 1 run
        await wait_for(pilot, lambda: job_screen(app).session is not None, "the relaunch")
        relaunched = job_screen(app)
        assert app.screen is relaunched
        assert relaunched.spec.world_size == 1
        await wait_for(pilot, lambda: not relaunched.job_active, "the run to end", 180)
        assert relaunched.summary is not None and relaunched.summary.ok
        assert relaunched.session is not None
        new_id = relaunched.session.run_id
        assert wait_no_tagged_pids(new_id) == []
        record = RunHistory().get(new_id)
        assert record is not None and record.status == "ok" and record.ranks_text() == "1/1 done"

        # the relaunch is the same run's second attempt: its row is at the top, once
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen), "the history")
        rows = table_rows(app.screen)  # type: ignore[arg-type]
        assert [r[0] for r in rows] == [three_runs[2], three_runs[0], three_runs[1]]
        assert (rows[0][6], rows[0][7]) == ("ok", "2")
        detail = str(app.screen.query_one("#run-detail").render())
        assert "2 attempts:" in detail
        assert f"#2 relaunch (relaunch of run {three_runs[2]})" in detail
        (listed,) = [r for r in RunHistory().listing() if r.id == three_runs[2]]
        assert [a.run_id for a in listed.attempts] == [three_runs[2], new_id]


CONSOLE = """
import asyncio, sys
from ddptui.core.job.spec import make_spec
from ddptui.core.job.profiles import bundled_trainer
from ddptui.ui.app import DdpApp

async def main() -> None:
    spec = make_spec(script=bundled_trainer(), script_args=("--sleep", "300"))
    app = DdpApp(spec)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("l")
        while True:
            await pilot.pause(0.5)

asyncio.run(main())
"""


def _poll(predicate: Any, what: str, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _running_run(state: Path) -> str | None:
    db = state / "history.sqlite3"
    if not db.exists():
        return None
    try:
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT id FROM runs WHERE status = 'running'").fetchone()
    except sqlite3.OperationalError:  # the file made, its table not yet
        return None
    return row[0] if row else None


def _logs_show_ranks(state: Path, run_id: str) -> bool:
    logs = list((state / "runs" / run_id / "nodes").glob("*.log"))
    text = "".join(p.read_text(errors="replace") for p in logs)
    return len(logs) == 2 and text.count("heartbeat=") >= 4


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


async def test_a_console_killed_mid_run_leaves_an_interrupted_run_with_readable_logs(
    state_dir: Path, tmp_path: Path
) -> None:
    """The console and its session's process killed outright (a lost machine, `kill -9` of
    both): nothing records the run's end, so the history says it was interrupted, and its
    logs and states are all there. (The console alone killed: its session process detaches,
    tests/unit/test_session_process.py.)"""
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state_dir), "PYTHONPATH": str(ROOT)}
    console = subprocess.Popen(  # noqa: ASYNC220 - started once, then polled
        [sys.executable, "-c", CONSOLE], env=env, cwd=tmp_path, stderr=subprocess.DEVNULL
    )
    run_id = ""
    try:
        run_id = _poll(lambda: _running_run(state_dir), "the run to be recorded")
        _poll(lambda: _logs_show_ranks(state_dir, run_id), "every rank's heartbeat in the logs")
        (session,) = _children(console.pid)  # the session's process
        os.kill(session, signal.SIGKILL)
        console.send_signal(signal.SIGKILL)
        console.wait(30)

        app = DdpApp(local_spec())
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("h")
            await wait_for(pilot, lambda: isinstance(app.screen, HistoryScreen), "the history")
            screen = app.screen
            assert isinstance(screen, HistoryScreen)
            (row,) = table_rows(screen)
            assert (row[0], row[6]) == (run_id, "interrupted")
            assert "0/4 done" in row[RANKS]
            await pilot.press("o")
            await wait_for(pilot, lambda: isinstance(app.screen, PastRunScreen), "the run")
            past = app.screen
            assert isinstance(past, PastRunScreen)
            await wait_for(pilot, lambda: past.logs.loaded, "its logs")
            text = past.logs.text("local0") + past.logs.text("local1")
            for rank in range(4):  # which node got which ranks is the rendezvous's choice
                assert f"] envcheck rank={rank} heartbeat=" in text
            assert set(past.grid.states().values()) == {RankState.RUNNING}
        record = RunHistory().get(run_id)
        assert record is not None and record.status == "interrupted" and record.ended is None
        assert f"PID {session}" in record.detail  # the process that ran the session
    finally:
        if console.poll() is None:
            console.kill()
            console.wait(30)
        # The job itself outlives its console by design (`ddptui attach` could follow it):
        # stop what this test started, by PID.
        for pid in tagged_pids(run_id) if run_id else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not run_id or wait_no_tagged_pids(run_id) == []


def fixed_history(tmp: Path) -> ScreenHost:
    """Runs at fixed times in a database at a fixed path: nothing depends on this machine."""
    db = Path("/tmp/ddptui-snapshot-history/history.sqlite3")
    if db.parent.exists():
        for stale in db.parent.iterdir():
            stale.unlink()
    history = RunHistory(db)
    spec = make_spec(script="/opt/ddptui/trainer/envcheck.py", nodes=1, nproc_per_node=1)
    fake_run("20260101-000000-aaaaaa", spec, history, T0, "ok", root=tmp)
    wide = make_spec(
        script="/opt/ddptui/trainer/elastic_ddp.py",
        nodes=2,
        nproc_per_node=2,
        profile="elastic-ddp",
        backend="ssh",
        hosts=("node1", "node2"),
    )
    fake_run("20260101-001000-bbbbbb", wide, history, T0 + 600, "failed", 2, root=tmp)
    fake_run("20260101-002000-cccccc", wide, history, T0 + 1200, "interrupted", root=tmp)
    history.runs()  # notices the interrupted run, reading its events where they are
    with sqlite3.connect(db) as conn:  # the run dirs as they would be in the state dir
        conn.execute("UPDATE runs SET run_dir = '/srv/state/runs/' || id")
        conn.execute(
            "UPDATE runs SET hosts = ? WHERE backend = 'ssh'", (json.dumps(["node1", "node2"]),)
        )
        # the failed run failed twice: torchrun restarted its workers once
        why = "rank 2 on node2 failed (exit code 1)"
        launch = Attempt(1, AttemptCause.LAUNCH, T0 + 600, "b", T0 + 620, "restarted", why)
        restart = Attempt(2, AttemptCause.RESTART, T0 + 620, "b", why=why, round=1)
        attempts = json.dumps([launch.to_dict(), restart.to_dict()])
        conn.execute("UPDATE runs SET attempts = ? WHERE id LIKE '%bbbbbb'", (attempts,))
    return ScreenHost(lambda: HistoryScreen(history))


def test_snapshot_history(
    snap_compare: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert snap_compare(fixed_history(tmp_path), press=["down"], terminal_size=SIZE)
    finally:
        monkeypatch.undo()
        time.tzset()
