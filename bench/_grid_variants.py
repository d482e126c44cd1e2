"""Provides what-if variants of the rank grid, measured beside the shipped one in grid_scale.

They are prototypes for the report, not code the console uses: each swaps one thing in the
child process that runs it, so the gain of a suggested change is measured, not guessed.
- `text-cells`: RankCell without its state CSS classes; the state is drawn as a styled Rich
  Text in render(), so a state change repaints one cell instead of re-applying the
  stylesheet to it twice (remove_class, then add_class).
- `batched`: the shipped cells, but a full update reaches the grid as one call per tick
  (show_rank for every event in one go) instead of 1,024 RankUpdate messages.
- `text-cells+batched`: both.
- `one-widget+batched`: the whole grid is one widget that draws each node's row with
  render_line from an array of states (no widget per cell); a change refreshes one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

VARIANTS = ("shipped", "text-cells", "batched", "text-cells+batched", "one-widget+batched")

_STYLES = {
    "pending": "dim #a0a0a0 on #303030",
    "assigned": "bold white on #1f4e8c",
    "running": "bold white on #2e7d32",
    "done": "bold white on #1b3d1d",
    "failed": "bold white on #b71c1c",
    "hung": "bold black on #f9a825",
}


def install(variant: str) -> None:
    """Swap the grid's cell class before the app is built (NodeRow looks it up by name)."""
    if "text-cells" not in variant:
        return
    from rich.text import Text

    from ddptui.ui.widgets import rank_grid

    class TextRankCell(rank_grid.RankCell):
        def watch_state(self, old: Any, new: Any) -> None:
            self.refresh()

        def on_mount(self) -> None:
            self.tooltip = self._tooltip_text()

        def render(self) -> Text:  # type: ignore[override]
            return Text(str(super().render()), style=_STYLES[self.state.value])

    rank_grid.RankCell = TextRankCell  # type: ignore[misc]


def _one_widget_grid(nodes: Sequence[str], nproc: int) -> Any:
    from rich.segment import Segment
    from rich.style import Style
    from textual.geometry import Region
    from textual.strip import Strip
    from textual.widget import Widget

    from ddptui.core.events import RankState
    from ddptui.ui.widgets.rank_grid import _GLYPH

    styles = {RankState(k): Style.parse(v) for k, v in _STYLES.items()}

    class OneWidgetRankGrid(Widget):
        DEFAULT_CSS = "OneWidgetRankGrid { height: auto; padding: 1 1 0 1; }"

        def __init__(self) -> None:
            super().__init__()
            self.nodes = list(nodes)
            self.row_of = {n: i for i, n in enumerate(self.nodes)}
            self.states = [[RankState.PENDING] * nproc for _ in self.nodes]
            self.ranks: list[list[int | None]] = [[None] * nproc for _ in self.nodes]

        def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
            return 2 * len(self.nodes)

        def show_rank(self, event: Any) -> None:
            row = self.row_of.get(event.node)
            if row is None or not 0 <= event.local_rank < nproc:
                return
            self.states[row][event.local_rank] = event.state
            if event.rank is not None:
                self.ranks[row][event.local_rank] = event.rank
            self.refresh(Region(0, 2 * row, self.size.width, 1))

        def render_line(self, y: int) -> Strip:
            if y % 2 or y // 2 >= len(self.nodes):
                return Strip.blank(self.size.width)
            row = y // 2
            segments = [Segment(f"{self.nodes[row]:<14.14}")]
            for lr, state in enumerate(self.states[row]):
                rank = self.ranks[row][lr]
                label = f"r{rank}" if rank is not None else f"L{lr}"
                segments += [
                    Segment(f"{label} {_GLYPH[state]}".center(12), styles[state]),
                    Segment(" "),
                ]
            return Strip(segments).crop_extend(0, self.size.width, None)

    return OneWidgetRankGrid()


async def prepare(
    variant: str, screen: Any, nproc: int
) -> tuple[Callable[[Any], None], Callable[[Any], bool]]:
    """How one full update's events reach the grid, and a check that all show a state."""
    grid: Any = screen.grid
    names = list(grid.nodes)
    if "one-widget" in variant:
        replacement = _one_widget_grid(names, nproc)
        await grid.parent.mount(replacement, before=grid)
        await grid.remove()
        grid = replacement

        def shows_all(state: Any) -> bool:
            return all(s == state for row in replacement.states for s in row)
    else:
        cells = [grid.cell(n, lr) for n in names for lr in range(nproc)]
        assert all(c is not None for c in cells) and len(cells) == len(names) * nproc

        def shows_all(state: Any) -> bool:
            return all(c.state == state for c in cells)

    if "batched" not in variant:
        return screen.relay.emit, shows_all
    pending: list[Any] = []

    def flush() -> None:
        batch, pending[:] = list(pending), []
        for event in batch:
            grid.show_rank(event)

    def send(event: Any) -> None:
        if not pending:
            screen.call_later(flush)
        pending.append(event)

    return send, shows_all
