"""Snapshot tests of the console's key screens, made deterministic with a fixed job.

Runs are replayed from torchrun output captured on this machine (tests/ui/replay.py), so no
path, port, run id or clock in a picture depends on the machine or the moment.
"""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp

from .conftest import SIZE
from .replay import crash_events, feed


def fixed_app(keymap: str | None = None) -> DdpApp:
    """No path, port, run id or clock in the picture depends on this machine or this run."""
    spec = make_spec(
        script="/opt/ddptui/trainer/envcheck.py",
        script_args=("--sleep", "30"),
        workdir="/srv/ddp",
        launcher="python3 -m torch.distributed.run",
    )
    return DdpApp(spec, keymap_path=keymap)


async def crashed(pilot: Pilot[Any]) -> None:
    """envcheck.py --fail-rank 1 on two nodes, as its events would arrive."""
    app = pilot.app
    assert isinstance(app, DdpApp)
    feed(app.job_screen, crash_events())
    await settle(pilot)


async def settle(pilot: Pilot[Any]) -> None:
    """Wait for the refresh (and any worker) after the lines, so the scrollbars are final."""
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_main_screen_before_launch(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), terminal_size=SIZE)


def test_help_screen(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), press=["question_mark"], terminal_size=SIZE)


def test_failed_run_with_root_cause(snap_compare: Any) -> None:
    """Red cells with exit codes, torchrun's root cause (rank 1, first observed) on the left."""
    assert snap_compare(fixed_app(), run_before=crashed, terminal_size=SIZE)


def test_merged_log_filtered_to_one_rank(snap_compare: Any) -> None:
    async def filtered(pilot: Pilot[Any]) -> None:
        await crashed(pilot)
        await pilot.press("m", "f", *"rank:1", "enter")
        await settle(pilot)

    assert snap_compare(fixed_app(), run_before=filtered, terminal_size=SIZE)


def test_vim_keymap_footer(snap_compare: Any) -> None:
    assert snap_compare(fixed_app("vim"), terminal_size=SIZE)


def test_vim_keymap_help(snap_compare: Any) -> None:
    assert snap_compare(fixed_app("vim"), press=["f1"], terminal_size=SIZE)
