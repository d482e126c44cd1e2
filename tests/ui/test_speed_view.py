"""Why it is slow, on screen: the straggler watch's named ranks marked in the grid, the speed
view (`V`) with each rank's compute vs wait and the min/max line, the keys that pause
detection and move the threshold. Events come as the session sends them (SpeedRound,
StragglerReport), made by the real SpeedWatch from a simulated job's collectives."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from ddptui.core.diagnose.speed import SpeedRound, SpeedWatch, StragglerReport
from ddptui.core.events import Event, GpuStat
from ddptui.ui.app import DdpApp
from tests.unit.diagnose.jobs import simulate
from tests.unit.diagnose.test_speed import _line

from .replay import T0, feed, running_events
from .test_snapshots import fixed_app, settle

NODES = {0: "local0", 1: "local0", 2: "local1", 3: "local1"}
GPUS = {
    "local0": (
        GpuStat(0, 99, 30000, 81559, 690.0, 61, (0,), sm_mhz=1980),
        GpuStat(1, 98, 30000, 81559, 688.0, 62, (1,), sm_mhz=1980),
    ),
    "local1": (
        GpuStat(0, 99, 30000, 81559, 692.0, 60, (2,), sm_mhz=1980),
        GpuStat(1, 71, 30000, 81559, 350.0, 66, (3,), sm_mhz=1410, throttle=("power cap",)),
    ),
}


def speed_events() -> list[Event]:
    """Rank 3 (local1) computes 0.12 s longer a step than the others; its GPU power-capped."""
    watch = SpeedWatch(4, every_s=0.0)
    samples = simulate(steps=80, extra=lambda r, s: 0.12 if r == 3 else 0.0, jitter_s=0.002)
    for sample in sorted(samples, key=lambda s: s.wall_ns):
        watch.sample(NODES[sample.rank], _line(sample))
    events = watch.check(T0 + 30, GPUS) + watch.check(T0 + 32, GPUS)
    return [e for e in events if isinstance(e, SpeedRound | StragglerReport)]


def texts(app: DdpApp) -> list[str]:
    return ["".join(span.text for span in line) for line in app.job_screen.grid.lines]


async def test_the_named_rank_is_marked_and_the_speed_view_says_why() -> None:
    app = fixed_app()
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.job_screen
        events = speed_events()
        report = next(e for e in events if isinstance(e, StragglerReport))
        assert report.ranks == (3,)
        feed(screen, [*running_events(), *events])
        await settle(pilot)
        cell = screen.grid.cell("local1", 1)
        assert cell is not None and cell.look == "straggler" and cell.slow is not None
        assert any("r3 »0.6" in t for t in texts(app)), texts(app)
        assert screen.grid.cell("local1", 0).look == "running"  # type: ignore[union-attr]
        assert "GPU 1 power cap, SM clock 1,410 MHz vs 1,980 on the others" in cell.tooltip
        warnings = [n.message for n in screen.outcome.notices if n.level == "warning"]
        assert warnings and warnings[-1].startswith("rank 3 (local1) at 0.6")

        assert not screen.speed.has_class("-shown")
        await pilot.press("V")
        await settle(pilot)
        assert screen.speed.has_class("-shown")
        rows = str(screen.speed.rows.render())
        assert rows.splitlines()[0].startswith("r3 ") and "0.32+0.00s 0.63" in rows
        assert "r0-2" in rows
        line = str(screen.speed.line.render())
        assert line.startswith("step ") and "compute" in line and "(r3)" in line
        assert "sm_clock 1410MHz (r3)..1980MHz (r0)" in line
        assert "power cap" in str(screen.speed.evidence.render())

        cleared = StragglerReport((), (), report.scores, report.method, (), ts=T0 + 40)
        feed(screen, [cleared])
        await settle(pilot)
        assert screen.grid.cell("local1", 1).look == "running"  # type: ignore[union-attr]
        assert screen.outcome.notices[-1].message == "the stragglers recovered"

        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert screen.speed.has_class("-shown")


async def test_pause_and_threshold_keys_go_to_the_session() -> None:
    app = fixed_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.job_screen
        asked: list[tuple[bool | None, float | None]] = []

        def set_speed(paused: bool | None = None, threshold: float | None = None) -> bool:
            asked.append((paused, threshold))
            return True

        screen.run.set_speed = set_speed  # type: ignore[method-assign]
        feed(screen, running_events())
        await settle(pilot)
        for key in ("P", "plus", "plus", "minus", "P"):
            await pilot.press(key)
        await settle(pilot)
        assert asked == [(True, None), (None, 0.85), (None, 0.9), (None, 0.85), (False, None)]
        paused = SpeedRound((), (), (), (), 0.85, True, ts=T0)
        feed(screen, [paused])
        await pilot.press("V")
        await settle(pilot)
        assert str(screen.speed.head.render()).startswith("detection paused (P resumes)")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_speed_view_snapshot(snap_compare: Any, size: tuple[int, int]) -> None:
    async def with_speed(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DdpApp)
        feed(app.job_screen, [*running_events(), *speed_events()])
        await settle(pilot)
        await pilot.press("V")
        await settle(pilot)

    assert snap_compare(fixed_app(), run_before=with_speed, terminal_size=size)
