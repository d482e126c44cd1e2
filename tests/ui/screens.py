"""Provides the console at 80x24 as the small-terminal tests drive it, and the pictures of it in
docs/screens/: `python -m tests.ui.screens` writes them again (SVG, as Textual saves a
screenshot), from the same replayed runs and keys as tests/ui/test_small_terminal.py,
tests/ui/test_goodput_line.py and tests/ui/test_quiet_phase_view.py."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp
from tests.ui.replay import crash_events, feed

SMALL = (80, 24)
LARGE = (160, 48)
SCREENS = Path(__file__).resolve().parents[2] / "docs" / "screens"


def fixed_app(keymap: str | None = None) -> DdpApp:
    """No path, port, run id or clock in the picture depends on this machine or this run."""
    spec = make_spec(
        script="/opt/ddptui/trainer/envcheck.py",
        workdir="/srv/ddp",
        launcher="python3 -m torch.distributed.run",
    )
    return DdpApp(spec, keymap_path=keymap)


async def settle(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def crashed(pilot: Pilot[Any]) -> None:
    """envcheck.py --fail-rank 1 on two nodes, replayed: the root cause outgrows the side."""
    app = pilot.app
    assert isinstance(app, DdpApp)
    feed(app.job_screen, crash_events())
    await settle(pilot)


async def write_screens() -> list[Path]:
    """The footer's view keys page, and the root-cause panel opened full screen."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    written = []
    app = fixed_app()
    async with app.run_test(size=SMALL) as pilot:
        await crashed(pilot)
        await pilot.press("full_stop", "full_stop")  # the page with V, r, o
        await settle(pilot)
        written.append(Path(app.save_screenshot("footer_80x24.svg", str(SCREENS))))
        await pilot.press("o")
        await settle(pilot)
        written.append(Path(app.save_screenshot("root_cause_full_screen_80x24.svg", str(SCREENS))))
    for size in (SMALL, LARGE):
        written += await _long_run_screens(size)
    return written


async def _long_run_screens(size: tuple[int, int]) -> list[Path]:
    """The goodput line of a run stalled after a restart, and a rank's quiet phase (a
    checkpoint 42 s into its 300 s budget) in its details and above the ranks."""
    from tests.ui.test_goodput_line import _stalled_after_a_restart
    from tests.ui.test_quiet_phase_view import _checkpointing

    written = []
    name = f"{size[0]}x{size[1]}"
    app = fixed_app()
    async with app.run_test(size=size) as pilot:
        await _stalled_after_a_restart(pilot)
        written.append(Path(app.save_screenshot(f"goodput_{name}.svg", str(SCREENS))))
    app = fixed_app()
    async with app.run_test(size=size) as pilot:
        screen = app.job_screen
        feed(screen, _checkpointing(time.time())[1])
        await settle(pilot)
        await pilot.click(screen.grid, offset=screen.grid.cell_offset("local1", 1))
        await settle(pilot)
        written.append(Path(app.save_screenshot(f"quiet_phase_{name}.svg", str(SCREENS))))
    return written


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:  # no run of the operator's is shown or kept
        os.environ["DDPTUI_STATE_DIR"] = str(Path(tmp) / "state")
        os.environ["DDPTUI_CONFIG_DIR"] = str(Path(tmp) / "config")
        for path in asyncio.run(write_screens()):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
