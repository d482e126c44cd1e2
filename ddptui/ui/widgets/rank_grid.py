"""Provides RankGrid: one row per node, one cell per local rank, coloured by rank state.

The grid is one widget drawing each node's row from plain state (no widget per cell), so a
128-node x 8-rank job repaints a row, not a thousand styled widgets, when its ranks change.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Offset, Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from ddptui.core.events import Diagnosis, NodeState, RankChanged, RankState
from ddptui.core.monitor.diagnosis import signal_name

_GLYPH = {
    RankState.PENDING: "·",
    RankState.ASSIGNED: "○",
    RankState.RUNNING: "▶",
    RankState.DONE: "✓",
    RankState.FAILED: "✗",
    RankState.HUNG: "!",
}

NAME_WIDTH, STATE_WIDTH, RESTARTS_WIDTH = 14, 11, 5
CELL_WIDTH, CELL_GAP = 12, 1
ROW_PITCH = 2  # a node's row, then a blank line
CELLS_START = NAME_WIDTH + STATE_WIDTH + RESTARTS_WIDTH


class RankSelected(Message):
    """The operator clicked a rank: the screen makes it the target of `jump to error`."""

    def __init__(self, node: str, local_rank: int) -> None:
        super().__init__()
        self.node = node
        self.local_rank = local_rank


class RankGridCell:
    """How the grid draws one (node, local rank), from the rank events the screen feeds it
    (the monitor's own record of a rank is `core.monitor.rank_cell.RankCell`); labelled
    `L<local>` until the rendezvous gives its global rank.

    A failed rank shows its exit code, or the signal that killed it (`SIGKILL` for -9/137);
    a hung one is amber, a straggler orange.
    """

    def __init__(self, node: str, local_rank: int) -> None:
        self.node = node
        self.local_rank = local_rank
        self.state = RankState.PENDING
        self.rank: int | None = None
        self.exit_code: int | None = None
        self.detail = ""
        self.diagnoses: tuple[Diagnosis, ...] = ()
        self.restarts = 0
        self.straggler = False
        self.selected = False
        self.history: list[tuple[float, RankState]] = [(time.time(), RankState.PENDING)]

    @property
    def label(self) -> str:
        return f"r{self.rank}" if self.rank is not None else f"L{self.local_rank}"

    @property
    def look(self) -> str:
        """The name of the cell's colours: its state, or `straggler` for a slow running rank."""
        return "straggler" if self.straggler else self.state.value

    def show(self, event: RankChanged) -> None:
        if event.rank is not None:
            self.rank = event.rank
        self.exit_code = event.exit_code
        self.detail = event.detail
        self.diagnoses = event.diagnoses
        self.restarts = event.restarts
        self.straggler = event.straggler and event.state == RankState.RUNNING
        if self.history[-1][1] != event.state:
            self.history.append((event.ts, event.state))
        self.state = event.state

    def render(self) -> str:
        glyph = _GLYPH[self.state]
        if self.state == RankState.FAILED and self.exit_code is not None:
            return f"{self.label} {glyph}{signal_name(self.exit_code) or self.exit_code}"
        if self.straggler:
            return f"{self.label} {glyph}slow"
        return f"{self.label} {glyph}"

    @property
    def tooltip(self) -> str:
        where = f"{self.node} local rank {self.local_rank}"
        head = f"rank {self.rank} — {where}" if self.rank is not None else where
        steps = " → ".join(state.value for _, state in self.history)
        lines = [head, steps]
        if self.exit_code is not None:
            killed = signal_name(self.exit_code)
            lines.append(f"exit code {self.exit_code}" + (f" ({killed})" if killed else ""))
        if self.restarts:
            lines.append(f"restarted {self.restarts} time(s)")
        if self.detail:
            lines.append(self.detail)
        lines += [f"• {d.summary}" for d in self.diagnoses]
        return "\n".join(lines)


class NodeRow:
    """A node's name, its agent's state, how often torchrun restarted it, and its ranks."""

    def __init__(self, node: str, nproc_per_node: int) -> None:
        self.node = node
        self.cells = [RankGridCell(node, lr) for lr in range(nproc_per_node)]
        self.state: NodeState | None = None
        self.state_text = "—"
        self.restarts = 0


class RankGrid(Widget):
    """Nodes by local ranks; the screen feeds it rank and node changes."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "rank-grid--name",
        "rank-grid--node",
        "rank-grid--node-running",
        "rank-grid--node-exited",
        "rank-grid--node-failed",
        "rank-grid--node-stopping",
        "rank-grid--restarts",
        "rank-grid--pending",
        "rank-grid--assigned",
        "rank-grid--running",
        "rank-grid--done",
        "rank-grid--failed",
        "rank-grid--hung",
        "rank-grid--straggler",
    }

    DEFAULT_CSS = """
    RankGrid {
        height: auto;
        padding: 1 1 0 1;
        & > .rank-grid--name { text-style: bold; }
        & > .rank-grid--node { color: $text-muted; }
        & > .rank-grid--node-running { color: $success; }
        & > .rank-grid--node-exited { color: $success; }
        & > .rank-grid--node-failed { color: $error; }
        & > .rank-grid--node-stopping { color: $warning; }
        & > .rank-grid--restarts { color: $warning; }
        & > .rank-grid--pending  { background: $panel; color: $text-muted; text-style: dim bold; }
        & > .rank-grid--assigned { background: $primary-darken-1; color: $text; text-style: bold; }
        & > .rank-grid--running  { background: $success; color: $text; text-style: bold; }
        & > .rank-grid--done     { background: $success-darken-3; color: $text; text-style: bold; }
        & > .rank-grid--failed   { background: $error; color: $text; text-style: bold; }
        & > .rank-grid--hung     { background: $warning; color: $background; text-style: bold; }
        & > .rank-grid--straggler {
            background: $warning-darken-2; color: $text; text-style: bold;
        }
    }
    """

    def __init__(self, nodes: Sequence[str], nproc_per_node: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._build(nodes, nproc_per_node)

    def _build(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        self.nodes = list(nodes)
        self.nproc_per_node = nproc_per_node
        self._rows = {n: NodeRow(n, nproc_per_node) for n in self.nodes}
        self._index = {n: i for i, n in enumerate(self.nodes)}
        self._strips: dict[int, Strip] = {}
        self._hovered: RankGridCell | None = None

    # -- feeding it ---------------------------------------------------------------------

    def set_nodes(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        """Rebuild the grid when the allocation names nodes the preview could not know."""
        if list(nodes) == self.nodes and nproc_per_node == self.nproc_per_node:
            return
        self._build(nodes, nproc_per_node)
        self.refresh(layout=True)

    def reset(self) -> None:
        """Fresh pending cells for a new run of the same job."""
        self._build(self.nodes, self.nproc_per_node)
        self.refresh(layout=True)

    def show_rank(self, event: RankChanged) -> None:
        cell = self.cell(event.node, event.local_rank)
        if cell is None:
            return
        cell.show(event)
        row = self._rows[event.node]
        if event.restarts > row.restarts:
            row.restarts = event.restarts
        self._changed(event.node, cell)

    def show_ranks(self, changes: Iterable[RankChanged]) -> None:
        for event in changes:
            self.show_rank(event)

    def show_node(self, node: str, state: NodeState, exit_code: int | None) -> None:
        row = self._rows.get(node)
        if row is not None:
            row.state = state
            row.state_text = state.value if exit_code is None else f"{state.value} {exit_code}"
            self._changed(node)

    def select(self, node: str | None, local_rank: int = 0) -> None:
        """Mark one rank as the operator's choice (None: no choice)."""
        for row in self._rows.values():
            for cell in row.cells:
                chosen = cell.node == node and cell.local_rank == local_rank
                if cell.selected != chosen:
                    cell.selected = chosen
                    self._changed(row.node)

    # -- reading it ---------------------------------------------------------------------

    def cell(self, node: str, local_rank: int) -> RankGridCell | None:
        row = self._rows.get(node)
        if row is None or not 0 <= local_rank < len(row.cells):
            return None
        return row.cells[local_rank]

    def restarts(self) -> dict[str, int]:
        return {node: row.restarts for node, row in self._rows.items()}

    def states(self) -> dict[tuple[str, int], RankState]:
        return {(c.node, c.local_rank): c.state for row in self._rows.values() for c in row.cells}

    def cell_at(self, x: int, y: int) -> RankGridCell | None:
        """The cell drawn at content offset (x, y), if any."""
        if y % ROW_PITCH or not 0 <= y // ROW_PITCH < len(self.nodes) or x < CELLS_START:
            return None
        column, within = divmod(x - CELLS_START, CELL_WIDTH + CELL_GAP)
        if within >= CELL_WIDTH:
            return None
        return self.cell(self.nodes[y // ROW_PITCH], column)

    def cell_offset(self, node: str, local_rank: int) -> Offset:
        """Where a cell is drawn, relative to the widget (padding included): where to click."""
        x = CELLS_START + local_rank * (CELL_WIDTH + CELL_GAP) + CELL_WIDTH // 2
        y = ROW_PITCH * self._index[node]
        return Offset(x + self.styles.padding.left, y + self.styles.padding.top)

    # -- drawing ------------------------------------------------------------------------

    def _changed(self, node: str, cell: RankGridCell | None = None) -> None:
        index = self._index[node]
        self._strips.pop(index, None)
        self.refresh()
        if cell is not None and cell is self._hovered:
            self.tooltip = cell.tooltip

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return CELLS_START + self.nproc_per_node * (CELL_WIDTH + CELL_GAP)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return ROW_PITCH * len(self.nodes)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def on_resize(self) -> None:
        self._strips.clear()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        index, gap = divmod(y, ROW_PITCH)
        if gap or index >= len(self.nodes):
            return Strip.blank(width, self.rich_style)
        strip = self._strips.get(index)
        if strip is None or strip.cell_length != width:
            strip = self._strips[index] = self._draw_row(self._rows[self.nodes[index]], width)
        return strip

    def _draw_row(self, row: NodeRow, width: int) -> Strip:
        style = self.get_component_rich_style
        node_look = f"rank-grid--node-{row.state.value}" if row.state else "rank-grid--node"
        if node_look not in self.COMPONENT_CLASSES:
            node_look = "rank-grid--node"
        segments = [
            Segment(f"{row.node:<{NAME_WIDTH}.{NAME_WIDTH}}", style("rank-grid--name")),
            Segment(f"{row.state_text:<{STATE_WIDTH}.{STATE_WIDTH}}", style(node_look)),
            Segment(
                f"{'↻' + str(row.restarts) if row.restarts else '':<{RESTARTS_WIDTH}}",
                style("rank-grid--restarts"),
            ),
        ]
        gap = Segment(" " * CELL_GAP, self.rich_style)
        for cell in row.cells:
            look = style(f"rank-grid--{cell.look}")
            if cell.selected:
                look += Style(bold=True, reverse=True)
            text = cell.render()[:CELL_WIDTH].center(CELL_WIDTH)
            segments += [Segment(text, look), gap]
        return Strip(segments).crop_extend(0, width, self.rich_style)

    # -- the mouse ----------------------------------------------------------------------

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        cell = self.cell_at(offset.x, offset.y) if offset is not None else None
        if cell is not None:
            self.post_message(RankSelected(cell.node, cell.local_rank))

    def on_mouse_move(self, event: events.MouseMove) -> None:
        offset = event.get_content_offset(self)
        cell = self.cell_at(offset.x, offset.y) if offset is not None else None
        if cell is not self._hovered:
            self._hovered = cell
            self.tooltip = cell.tooltip if cell is not None else None
