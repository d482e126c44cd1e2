"""RankGrid: each rank state has its own look, the global rank replaces the local label,
a click on a cell says which rank."""

from __future__ import annotations

from rich.style import Style

from ddptui.core.events import NodeState, RankChanged, RankState
from ddptui.ui.widgets.rank_grid import RankGrid, RankSelected

from .conftest import SIZE
from .widget_host import WidgetHost

NODES = ["local0", "local1"]


class GridHost(WidgetHost):
    def __init__(self) -> None:
        super().__init__(RankGrid(NODES, 2))
        self.chosen: list[tuple[str, int]] = []

    def on_rank_selected(self, message: RankSelected) -> None:
        self.chosen.append((message.node, message.local_rank))


async def test_cells_show_every_state() -> None:
    grid = RankGrid(NODES, 2)
    async with WidgetHost(grid).run_test(size=SIZE) as pilot:
        cell = grid.cell("local1", 1)
        assert cell is not None
        assert cell.render() == "L1 ·"
        assert cell.look == "pending"
        assert "L1 ·" in drawn_row(grid, 1)

        steps = [
            (RankState.ASSIGNED, None, "r3 ○"),
            (RankState.RUNNING, None, "r3 ▶"),
            (RankState.HUNG, None, "r3 !"),
            (RankState.RUNNING, None, "r3 ▶"),
            (RankState.FAILED, 7, "r3 ✗7"),
        ]
        for state, code, text in steps:
            grid.show_rank(RankChanged(3, "local1", 1, state, code, "boom" if code else ""))
            await pilot.pause()
            assert cell.render() == text
            assert cell.look == state.value
            assert drawn_style(grid, 1, text) == grid.get_component_rich_style(
                f"rank-grid--{state.value}"
            )
        assert "exit code 7" in cell.tooltip
        assert "boom" in cell.tooltip

        done = grid.cell("local0", 0)
        assert done is not None
        grid.show_rank(RankChanged(0, "local0", 0, RankState.DONE, 0))
        await pilot.pause()
        assert done.render() == "r0 ✓"
        assert done.look == "done"

        grid.show_node("local1", NodeState.FAILED, 1)
        grid.show_rank(RankChanged(5, "nowhere", 0, RankState.RUNNING))  # ignored, no crash
        await pilot.pause()
        assert drawn_row(grid, 1).startswith("local1        failed 1")


async def test_a_click_on_a_cell_says_which_rank_and_select_marks_it() -> None:
    app = GridHost()
    async with app.run_test(size=SIZE) as pilot:
        grid = app.widget
        assert isinstance(grid, RankGrid)
        await pilot.click(grid, offset=grid.cell_offset("local1", 1))
        await pilot.pause()
        assert app.chosen == [("local1", 1)]
        grid.select("local1", 1)  # what the screen does with it
        await pilot.pause()
        cell = grid.cell("local1", 1)
        assert cell is not None and cell.selected
        assert drawn_style(grid, 1, "L1 ·").reverse
        await pilot.click(grid, offset=grid.cell_offset("local1", 1) + (0, 1))
        await pilot.pause()
        assert app.chosen == [("local1", 1)]  # the blank line between rows chooses nothing


def drawn_row(grid: RankGrid, index: int) -> str:
    return grid.render_line(line_of(grid, index)).text


def line_of(grid: RankGrid, index: int) -> int:
    y = grid.line_of(grid.nodes[index])
    assert y is not None
    return y


def drawn_style(grid: RankGrid, index: int, text: str) -> Style:
    """The style of the segment that shows `text` in a node's drawn row."""
    for segment in grid.render_line(line_of(grid, index)):
        if segment.text.strip() == text:
            assert segment.style is not None
            return segment.style
    raise AssertionError(f"{text!r} not drawn in row {index}: {drawn_row(grid, index)!r}")


async def test_a_rank_that_changes_redraws_its_own_lines_and_the_screen_shows_it() -> None:
    nodes = [f"node{i}" for i in range(6)]
    grid = RankGrid(nodes, 2)
    async with WidgetHost(grid).run_test(size=SIZE) as pilot:
        grid.show_ranks(
            RankChanged(i * 2 + r, node, r, RankState.RUNNING)
            for i, node in enumerate(nodes)
            for r in range(2)
        )
        await pilot.pause()
        drawn: list[int] = []
        draw = grid._draw

        def counted(line: object, width: int) -> object:
            drawn.append(grid.lines.index(line))  # type: ignore[arg-type]
            return draw(line, width)  # type: ignore[arg-type]

        grid._draw = counted  # type: ignore[method-assign]
        grid.show_rank(RankChanged(7, "node3", 1, RankState.FAILED, 9))
        await pilot.pause()
        await pilot.pause()
        screen = "\n".join(s.text for s in pilot.app.screen._compositor.render_strips())
        assert "r7 ✗9" in screen  # on the screen, not only in the widget's lines
        assert "r6 ▶" in screen and "r9 ▶" in screen  # its neighbours as they were
        node_line = grid.line_of("node3", 1)
        assert node_line in drawn
        # The node's line and the counts at the top (one more failed): not all 7+ lines.
        assert len(set(drawn)) <= 3, (drawn, len(grid.lines))
        assert len(grid.lines) > 6
