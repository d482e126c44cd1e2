"""GPU telemetry in the console: each rank's cell shows its GPU, the GPU panel (`u`) draws
every GPU over the run, flags show in the grid, the panel and the notices. Samples come as
the session sends them (GpuReport events), with values from the 2 x H100 captures."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Sparkline

from ddptui.core.events import Event, GpuFlag, GpuReport, GpuStat
from ddptui.ui.app import DdpApp
from ddptui.ui.widgets.gpu_panel import GpuBlock

from .replay import T0, feed, running_events
from .test_snapshots import fixed_app, settle

TOTAL = 81559
BUSY = GpuFlag("busy_no_progress", 0, 2, "GPU 0 busy (100%) but rank 2 made no progress for 31 s")
FULL = GpuFlag("mem_high", 1, 1, "GPU 1 memory 96% full (78300/81559 MiB)")


def gpu_events(samples: int = 12) -> list[Event]:
    """local0: ranks 0, 1 on GPUs 0, 1 (rank 1's memory fills up); local1: ranks 2, 3, rank 2's
    GPU busy without progress."""
    events: list[Event] = []
    for i in range(samples):
        ts = T0 + i
        local0 = (
            GpuStat(0, 60 + i, 20000 + 100 * i, TOTAL, 300.5, 55, (0,)),
            GpuStat(1, 70, 60000 + 1600 * i, TOTAL, 310.0, 57, (1,)),
        )
        local1 = (
            GpuStat(0, 100, 1665, TOTAL, 140.0, 41, (2,)),
            GpuStat(1, 0, 1665, TOTAL, 120.0, 40, (3,)),
        )
        last = i == samples - 1
        events.append(GpuReport("local0", local0, (FULL,) if last else (), ts=ts))
        events.append(GpuReport("local1", local1, (BUSY,) if last else (), ts=ts))
    return events


def texts(app: DdpApp) -> list[str]:
    return ["".join(span.text for span in line) for line in app.job_screen.grid.lines]


async def test_cells_panel_and_flags_at_two_sizes() -> None:
    app = fixed_app()
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.job_screen
        feed(screen, running_events())
        await settle(pilot)
        assert not any("%" in t for t in texts(app))  # no telemetry: no GPU line
        feed(screen, gpu_events())
        await settle(pilot)
        lines = texts(app)
        assert any("71% 21/80G" in t and "70% 76/80G" in t for t in lines), lines
        assert any("100% 2/80G" in t and "0% 2/80G" in t for t in lines), lines
        cell = screen.grid.cell("local0", 1)
        assert cell is not None and cell.gpu_look == "gpu-high"
        assert screen.grid.cell("local1", 0).gpu_look == "gpu-flag"  # type: ignore[union-attr]
        assert "⚠ GPU 0 busy (100%) but rank 2" in screen.grid.cell("local1", 0).tooltip  # type: ignore[union-attr]
        notices = [n.message for n in screen.outcome.notices if n.level == "warning"]
        assert notices == [f"local0: {FULL.detail}", f"local1: {BUSY.detail}"]
        for event in gpu_events():  # the same flags again: no new notice
            screen.relay.emit(event)
        await settle(pilot)
        assert len([n for n in screen.outcome.notices if n.level == "warning"]) == 2

        assert not screen.gpus.display or not screen.gpus.has_class("-shown")
        assert not list(screen.gpus.query(GpuBlock))  # none built until the panel shows
        await pilot.press("u")
        await settle(pilot)
        assert screen.gpus.has_class("-shown")
        blocks = list(screen.gpus.query(GpuBlock))
        assert [(b.node, b.index) for b in blocks] == [
            ("local0", 0),
            ("local0", 1),
            ("local1", 0),
            ("local1", 1),
        ]
        assert [len(s.data or []) for s in blocks[1].query(Sparkline)] == [24, 24]
        assert blocks[1].mem_bar.has_class("-high") and not blocks[0].mem_bar.has_class("-high")
        assert "made no progress" in str(blocks[2].flags.render())
        feed(screen, gpu_events(3))  # while it shows, each sample reaches its block
        await settle(pilot)
        assert [len(s.data or []) for s in blocks[1].query(Sparkline)] == [27, 27]
        assert "· 62% ·" in str(blocks[0].heading.render())  # the newest sample (was 71%)
        await pilot.press("u")
        await settle(pilot)
        assert not screen.gpus.has_class("-shown")

        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        short = texts(app)
        assert any("62%" in t and "70%" in t for t in short), short  # the narrow grid's form


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_gpu_telemetry_snapshot(snap_compare: Any, size: tuple[int, int]) -> None:
    async def with_gpus(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DdpApp)
        feed(app.job_screen, [*running_events(), *gpu_events()])
        await settle(pilot)
        await pilot.press("u")
        await settle(pilot)

    assert snap_compare(fixed_app(), run_before=with_gpus, terminal_size=size)
