"""The goodput line: a real local run (real torchrun, trainer/envcheck.py) launched by key at
80x24 shows where its time goes under the job while it runs, and the summary's split at its end;
the line's words and bar from a split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddptui.core.story.goodput import Goodput, GoodputReport, GoodputSplit, Part
from ddptui.ui.app import DdpApp
from ddptui.ui.widgets.goodput_line import BAR_CELLS, describe_goodput

from .conftest import local_spec, wait_for
from .screens import SMALL, fixed_app
from .test_small_terminal import screen_text

RUN_TIMEOUT = 180.0


async def test_the_goodput_line_shows_under_the_job_at_80x24_live_and_at_the_end() -> None:
    app = DdpApp(local_spec("--sleep", "3"))
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        line = screen.job_panel.goodput
        assert not line.display  # no run, no line
        await pilot.press("l")
        await wait_for(pilot, lambda: line.goodput is not None, "the first split", RUN_TIMEOUT)
        assert screen.summary is None and line.current == Part.LAUNCH  # live: still launching
        await wait_for(pilot, lambda: screen.summary is not None, "the summary", RUN_TIMEOUT)
        await pilot.pause(0.3)
        summary = screen.summary
        assert summary is not None and summary.goodput is not None
        assert line.goodput == summary.goodput  # the summary's split is the last word
        parts = summary.goodput.parts
        assert parts.stepping > 0 and parts.launch > 0 and parts.teardown > 0
        assert parts.total == summary.goodput.wall_s
        # on screen, in the job panel's rows, one line within 80 columns
        assert line.display and line.region.height == 1
        assert screen.job_panel.region.contains_region(line.region)
        assert line.region.right <= SMALL[0]
        shown = [row for row in screen_text(app) if "goodput " in row and "▕" in row]
        assert len(shown) == 1, shown
        assert f"goodput {summary.goodput.fraction:.0%}".replace("  ", " ") in " ".join(
            shown[0].split()
        )
        assert "launch" in shown[0]


def test_the_line_says_the_share_the_bar_and_the_time_lost_biggest_first() -> None:
    split = GoodputSplit(stepping=62.0, launch=20.0, restart=8.0, teardown=10.0)
    text = describe_goodput(Goodput(0.0, 100.0, split), Part.STALLED).plain
    assert text.startswith("goodput  62% ▕")
    bar = text.split("▕", 1)[1].split("▏", 1)[0]
    assert len(bar) == BAR_CELLS and bar.count("█") == 10  # 62% of 16 cells
    assert text.endswith("▏ now stalled · launch 20% · teardown 10% · restart 8%")
    steady = describe_goodput(Goodput(0.0, 10.0, GoodputSplit(stepping=10.0)), Part.STEPPING)
    assert steady.plain == "goodput 100% ▕" + "█" * BAR_CELLS + "▏"


def test_a_past_runs_facts_say_its_goodput() -> None:
    from ddptui.core.events import RankState, RankSummary
    from ddptui.core.runs.history import RunHistory
    from ddptui.core.runs.run_dir import RunDir
    from ddptui.core.runs.summary import RunSummary
    from ddptui.ui.screens.past_run import describe_record

    run = RunDir.create("20260101-000000-abcdef")
    RunHistory().started(run, local_spec(), started=1000.0)
    goodput = Goodput(1000.0, 1100.0, GoodputSplit(stepping=62.0, launch=20.0, stalled=18.0))
    ranks = (RankSummary(0, "local0", 0, RankState.DONE, 0),)
    summary = RunSummary(True, 1, ranks, str(run.path), run.run_id, goodput=goodput)
    RunHistory().finished(summary, ended=1100.0)
    record = RunHistory().get(run.run_id)
    assert record is not None
    lines = describe_record(record).plain.splitlines()
    assert "goodput  62% ▕" in lines[2] and lines[2].endswith("launch 20% · stalled 18%")


async def _stalled_after_a_restart(pilot: Any) -> None:
    """Two nodes of envcheck.py replayed, running, and a split as a stalled run's would be."""
    from tests.ui.replay import T0, feed, running_events

    split = GoodputSplit(stepping=41.0, launch=12.0, restart=6.0, stalled=9.0)
    report = GoodputReport(Goodput(T0, T0 + 68.0, split), Part.STALLED, ts=T0 + 68.0)
    feed(pilot.app.job_screen, [*running_events(), report])
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_snapshot_goodput_line_80x24(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), run_before=_stalled_after_a_restart, terminal_size=SMALL)


def test_snapshot_goodput_line_160x48(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), run_before=_stalled_after_a_restart, terminal_size=(160, 48))


async def test_the_served_console_shows_the_goodput_the_run_recorded(tmp_path: Path) -> None:
    """`ddptui serve`'s tab follows the run from its directory: the goodput events its session
    recorded show in the same line."""
    from .test_served_console import _running_run

    run = _running_run(tmp_path)
    split = GoodputSplit(stepping=30.0, launch=10.0)
    run.record(GoodputReport(Goodput(1000.0, 1040.0, split), Part.STEPPING, ts=1040.0))
    run.close()
    app = DdpApp(run.read_spec(), attach=run, follow=True)
    async with app.run_test(size=SMALL) as pilot:
        line = app.job_screen.job_panel.goodput
        await wait_for(pilot, lambda: line.goodput is not None, "the recorded split", 30)
        await pilot.pause()
        assert line.goodput is not None and line.goodput.parts == split
        shown = [row for row in screen_text(app) if "goodput " in row and "▕" in row]
        assert len(shown) == 1 and "goodput  75%" in shown[0] and "launch 25%" in shown[0]
