"""The console at every size: the job folds to a line once launched, the grid shows every rank,
the logs get the rest, and all of it follows the terminal as it is resized mid-run."""

from __future__ import annotations

from ddptui.core.events import RankChanged, RankState
from ddptui.ui.app import DdpApp
from ddptui.ui.widgets.grid_cells import RankGridCell
from ddptui.ui.widgets.rank_grid import RankGrid

from .conftest import local_spec
from .replay import feed, running_events


def drawn_cells(grid: RankGrid) -> set[tuple[str, int]]:
    """Every rank the grid draws a cell or glyph for; a folded range stands for its nodes."""
    shown: set[tuple[str, int]] = set()
    for line in grid.lines:
        for span in line:
            if isinstance(span.cell, RankGridCell):
                shown.add((span.cell.node, span.cell.local_rank))
    return shown


def fits(grid: RankGrid) -> bool:
    return all(sum(len(s.text) for s in line) <= grid.size.width for line in grid.lines)


async def test_resizing_mid_run_keeps_every_rank_and_ten_log_lines() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.job_screen
        assert not screen.job_panel.folded  # before launch: the whole job
        feed(screen, running_events())
        await pilot.pause()
        everyone = {(node, lr) for node in ("local0", "local1") for lr in (0, 1)}

        assert screen.job_panel.folded and screen.job_panel.outer_size.height == 3
        view = screen.logs.active_view
        assert view.scrollable_content_region.height >= 10
        assert screen.has_class("-narrow") and screen.has_class("-short")
        assert drawn_cells(screen.grid) == everyone and fits(screen.grid)
        compact = [line for line in screen.grid.lines if any(s.cell for s in line)]
        assert len(compact) == 2  # a line per node, a short cell per rank

        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert not screen.has_class("-narrow") and not screen.has_class("-short")
        assert drawn_cells(screen.grid) == everyone and fits(screen.grid)
        assert "r0▶ r1▶" in screen.grid.render_line(screen.grid.line_of("local0") or 0).text
        assert view.scrollable_content_region.height >= 25

        screen.grid.show_rank(RankChanged(3, "local1", 1, RankState.FAILED, 1))
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert drawn_cells(screen.grid) == everyone and fits(screen.grid)
        assert "failed 1" in "".join(s.text for s in screen.grid.lines[0])
        assert view.scrollable_content_region.height >= 10

        await pilot.press("c")  # the full commands, one key away
        await pilot.pause()
        assert not screen.job_panel.folded
        await pilot.press("c")
        await pilot.pause()
        assert screen.job_panel.folded


async def test_go_to_a_rank_by_name_shows_its_details_and_its_log() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.job_screen
        feed(screen, running_events())
        await pilot.pause()
        await pilot.press("J", *"r3", "enter")
        await pilot.pause()
        assert screen.selected == ("local1", 1)
        assert screen.logs.active_node == "local1"
        details = str(screen.details.render())
        assert "rank 3 · local1 L1 · running" in details and "last line:" in details
        await pilot.press("J", *"local0/1", "enter")
        await pilot.pause()
        assert screen.selected == ("local0", 1)
        await pilot.press("J", *"nowhere", "enter")
        await pilot.pause()
        assert screen.selected == ("local0", 1)  # refused, with a message
