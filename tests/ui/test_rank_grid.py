"""RankGrid: each rank state has its own look, the global rank replaces the local label."""

from __future__ import annotations

from ddptui.core.events import NodeState, RankChanged, RankState
from ddptui.ui.app import DdpApp

from .conftest import SIZE, local_spec


async def test_cells_show_every_state() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        grid = app.job_screen.grid
        cell = grid.cell("local1", 1)
        assert cell is not None
        assert cell.render() == "L1 ·"
        assert cell.has_class("-pending")

        steps = [
            (RankState.ASSIGNED, None, "r3 ○", "-assigned"),
            (RankState.RUNNING, None, "r3 ▶", "-running"),
            (RankState.HUNG, None, "r3 !", "-hung"),
            (RankState.RUNNING, None, "r3 ▶", "-running"),
            (RankState.FAILED, 7, "r3 ✗7", "-failed"),
        ]
        for state, code, text, css in steps:
            grid.show_rank(RankChanged(3, "local1", 1, state, code, "boom" if code else ""))
            await pilot.pause()
            assert cell.render() == text
            assert cell.has_class(css)
            assert len([c for c in cell.classes if c.startswith("-")]) == 1
        assert "exit code 7" in str(cell.tooltip)
        assert "boom" in str(cell.tooltip)

        done = grid.cell("local0", 0)
        assert done is not None
        grid.show_rank(RankChanged(0, "local0", 0, RankState.DONE, 0))
        await pilot.pause()
        assert done.render() == "r0 ✓"
        assert done.has_class("-done")

        grid.show_node("local1", NodeState.FAILED, 1)
        grid.show_rank(RankChanged(5, "nowhere", 0, RankState.RUNNING))  # ignored, no crash
        await pilot.pause()
