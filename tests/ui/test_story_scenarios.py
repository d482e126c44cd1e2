"""The story table: real torchrun jobs through the console at 80x24, one failure each, and the
same first line on every surface (the summary's detail, the root-cause panel's first row, the
grid's blamed cell, the run's events as headless mode prints them, history).

Each scenario runs its script unmodified on the local backend (2 nodes; gloo on CPU) and asks:
the story's lead names the expected kind and rank, the summary opens with it, the panel's
first row says it, the blamed rank's cell is marked, the verdict is said at most once (final),
each cause is one incident, and the history row reads the same. Node and agent loss need hosts
of their own: tests/integration/ has them over SSH.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from ddptui.core.events import RankState
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.history import RunHistory
from ddptui.core.story.incident import IncidentKind
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.job import JobScreen
from tests.procs import pids_with_tag

from .conftest import local_spec, wait_for

SMALL = (80, 24)
RUN_TIMEOUT = 180.0
SCRIPTS = Path(__file__).resolve().parents[1] / "data" / "scripts"
TRAINER = Path(__file__).resolve().parents[2] / "trainer"
STRAGGLER = Path(__file__).resolve().parents[1] / "data" / "straggler" / "slow_rank_ddp.py"


def events_of(screen: JobScreen) -> list[dict[str, Any]]:
    assert screen.summary is not None
    path = Path(screen.summary.run_dir) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_story(screen: JobScreen, kind: IncidentKind, rank: int | None) -> str:
    """Every surface opens with the same lead; returns it (the summary's first line)."""
    summary = screen.summary
    assert summary is not None
    first = summary.detail.splitlines()[0]
    who = f": rank {rank} on " if rank is not None else ""
    assert summary.headline == first, summary.detail
    assert first.startswith(f"{kind.words}{who}") or (
        summary.ok and f"; {kind.words}{who}" in first
    ), first
    # the root-cause panel: its first row says the same kind and rank
    row = screen.root_cause.describe().plain.splitlines()[0]
    assert row.startswith(f"▶ {kind.words}{who}"), row
    assert screen.root_cause.has_class("-shown")
    # the grid: the blamed rank's cell is marked, no other
    cells = [screen.grid.cell(node, local) for node, local in screen.grid.states()]
    blamed = [c for c in cells if c is not None and c.blamed is not None]
    if rank is not None and kind != IncidentKind.OPERATOR:
        assert [c.rank for c in blamed] == [rank], [c.render() for c in blamed]
        assert "◆" in blamed[0].render() or blamed[0].glyph == "◆"
    # the run's events, as headless mode prints them: one incident per cause, the verdict
    # said once (final) and naming the same rank
    events = events_of(screen)
    verdicts = [e for e in events if e["event"] == "verdict"]
    assert len(verdicts) <= 1 and all(v["final"] for v in verdicts), verdicts
    if verdicts and rank is not None and kind.failure and kind != IncidentKind.OPERATOR:
        assert verdicts[0]["rank"] == rank, verdicts
    numbers = {e["number"] for e in events if e["event"] == "incident" and e["kind"] == kind}
    assert len(numbers) == 1, [e for e in events if e["event"] == "incident"]
    assert len([e for e in events if e["event"] == "mismatch"]) <= 1
    # history
    record = RunHistory().get(summary.run_id)
    assert record is not None and record.detail.splitlines()[0] == first
    return first


async def launch(pilot: Pilot[object], screen: JobScreen) -> str:
    await pilot.press("l")
    await wait_for(pilot, lambda: screen.session is not None, "the session")
    assert screen.session is not None
    return screen.session.run_id


async def to_the_end(pilot: Pilot[object], screen: JobScreen) -> None:
    await wait_for(pilot, lambda: not screen.job_active, "the run to end", RUN_TIMEOUT)
    await wait_for(pilot, lambda: screen.summary is not None, "the summary", 30)
    await pilot.pause(0.3)


async def teardown(pilot: Pilot[object], screen: JobScreen) -> None:
    await pilot.press("t")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmScreen), "the confirm")
    await pilot.press("y")
    await to_the_end(pilot, screen)


def running(screen: JobScreen) -> bool:
    return all(s == RankState.RUNNING for s in screen.grid.states().values())


ENDED_BY_A_FAILURE = [
    pytest.param(
        ("envcheck", ("--fail-rank", "1")), IncidentKind.CRASH, 1,
        "RuntimeError: envcheck: deliberate failure on rank 1", id="crash",
    ),
    pytest.param(
        ("scenario", ("--oom", "2")), IncidentKind.OUT_OF_MEMORY, 2, "fix it first",
        id="out_of_memory",
    ),
    pytest.param(
        ("/nonexistent/train.py", ()), IncidentKind.REFUSED, None, "/nonexistent/train.py",
        id="missing_script",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("job", "kind", "rank", "said"), ENDED_BY_A_FAILURE)
async def test_a_run_that_fails_names_its_kind_and_rank_everywhere(
    job: tuple[str, tuple[str, ...]], kind: IncidentKind, rank: int | None, said: str
) -> None:
    script, args = job
    if script == "envcheck":
        spec = local_spec(*args)
    else:
        path = SCRIPTS / "scenario.py" if script == "scenario" else Path(script)
        spec = make_spec(script=str(path), script_args=args)
    app = DdpApp(spec)
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await launch(pilot, screen)
        await to_the_end(pilot, screen)
        assert said in check_story(screen, kind, rank)


async def test_a_nan_on_a_rank_whose_lines_carry_no_step_is_the_story_of_a_finished_run() -> None:
    spec = make_spec(script=str(SCRIPTS / "scenario.py"), script_args=("--nan", "3"))
    app = DdpApp(spec)
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await launch(pilot, screen)
        await to_the_end(pilot, screen)
        assert screen.summary is not None and screen.summary.ok
        first = check_story(screen, IncidentKind.NON_FINITE, 3)
        assert first.startswith("finished; non-finite metric: rank 3 on local")
        assert "loss is nan in rank 3's 5th report" in first and "step 0" not in first


async def test_a_setting_one_rank_alone_sees_is_the_story_of_a_finished_run() -> None:
    spec = make_spec(
        script=str(SCRIPTS / "scenario.py"),
        script_args=("--env-on", "1", "NCCL_ALGO=Tree"),
        nproc_per_node=1,
    )
    app = DdpApp(spec)
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await launch(pilot, screen)
        await to_the_end(pilot, screen)
        assert screen.summary is not None and screen.summary.ok
        first = check_story(screen, IncidentKind.SETTINGS_DIFFER, 1)
        assert first.startswith("finished; settings differ: rank 1 on local"), first
        assert "NCCL_ALGO=Tree there, unset elsewhere" in first
        settings = [e for e in events_of(screen) if e["event"] == "settings"]
        assert settings[0]["differences"] == [], settings  # the same at start
        assert [d["name"] for d in settings[-1]["differences"]] == ["NCCL_ALGO"]


async def test_a_skipped_collective_is_a_hang_of_its_rank_after_the_teardown() -> None:
    spec = make_spec(
        script=str(TRAINER / "hang.py"), script_args=("--skip-rank", "1", "--steps", "6"),
        hang_timeout=8,
    )  # fmt: skip
    app = DdpApp(spec)
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await launch(pilot, screen)
        lead = screen.root_cause
        await wait_for(
            pilot,
            lambda: lead.lead_incident is not None and lead.lead_incident.blamed == (1,),
            "the hang's suspect named",
            RUN_TIMEOUT,
        )
        await teardown(pilot, screen)
        check_story(screen, IncidentKind.HANG, 1)
        incident = lead.lead_incident
        assert incident is not None and incident.over  # the stall ended with the run


async def test_an_operator_teardown_of_a_healthy_run_is_the_operator_s() -> None:
    app = DdpApp(local_spec("--sleep", "60"))
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await launch(pilot, screen)
        await wait_for(pilot, lambda: running(screen), "every rank running", RUN_TIMEOUT)
        await teardown(pilot, screen)
        first = check_story(screen, IncidentKind.OPERATOR, None)
        assert not [e for e in events_of(screen) if e["event"] == "verdict"]
        assert first.startswith("stopped by the operator")


async def test_a_worker_killed_with_restarts_allowed_is_told_as_a_restart() -> None:
    spec = make_spec(
        script=str(TRAINER / "elastic_ddp.py"), script_args=("--steps", "30", "--step-time",
        "0.3"), max_restarts=1,
    )  # fmt: skip
    app = DdpApp(spec)
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        run_id = await launch(pilot, screen)
        await wait_for(pilot, lambda: running(screen), "every rank running", RUN_TIMEOUT)
        worker = next(pid for pid in pids_with_tag(f"{run_id}.") if _is_rank(pid, 1))
        os.kill(worker, signal.SIGKILL)
        await to_the_end(pilot, screen)
        assert screen.summary is not None and screen.summary.ok, screen.summary
        first = check_story(screen, IncidentKind.RESTARTED, 1)
        assert first.startswith("finished after 1 restart(s); restarted: rank 1 on local")
        assert "— failed (SIGKILL)" in first
        kinds = [e["kind"] for e in events_of(screen) if e["event"] == "incident"]
        assert "restarted" in kinds


async def test_a_size_mismatch_names_the_odd_rank_not_the_one_gloo_aborted() -> None:
    """gloo aborts rank 0, the rank that received the odd size, before it records the
    collective; rank 1's own record of it (written as it raises) and its history name it,
    whichever reaches the console first."""
    spec = make_spec(
        script=str(TRAINER / "mismatch.py"), script_args=("--steps", "40"), nproc_per_node=1
    )
    app = DdpApp(spec)
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await launch(pilot, screen)
        await to_the_end(pilot, screen)
        audited = [e for e in events_of(screen) if e["event"] == "mismatch"]
        assert [(e["kind"], e["culprits"]) for e in audited] == [("size", [1])], audited
        first = check_story(screen, IncidentKind.COLLECTIVE_MISMATCH, 1)
        assert "rank 0 died in it" in first


def _is_rank(pid: int, rank: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return f"RANK={rank}".encode() in env and b"torchrun" not in cmdline


async def test_a_rank_slow_the_whole_run_is_the_straggler_of_a_finished_run() -> None:
    """A plain DDP loop (tests/data/straggler/slow_rank_ddp.py) in which rank 2 sleeps twice
    as long a step, start to end: the run finishes, and its story is that straggler."""
    spec = make_spec(
        script=str(STRAGGLER), script_args=("--steps", "400", "--slow-rank", "2", "--slow", "2"),
    )  # fmt: skip
    app = DdpApp(spec)
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await launch(pilot, screen)
        await to_the_end(pilot, screen)
        assert screen.summary is not None and screen.summary.ok, screen.summary
        first = check_story(screen, IncidentKind.STRAGGLER, 2)
        assert first.startswith("finished; straggler: rank 2 on local"), first
        assert "its peers wait" in first
        said = [e for e in events_of(screen) if e["event"] == "straggler" and e["ranks"]]
        assert said and all(e["ranks"] == [2] for e in said), said  # no one else named
