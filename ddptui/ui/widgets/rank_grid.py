"""Provides RankGrid: every rank of every node, coloured by rank state, at any width.

The grid is one widget drawing lines from plain state (no widget per cell); grid_layout
decides what goes on each line: labelled cells while they fit, else a glyph per rank with
runs of same-state nodes folded, so a 1,024-node job shows its outliers, never a cut row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Offset, Region, Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from ddptui.core.diagnose.speed import StragglerReport
from ddptui.core.events import GpuReport, NodeState, RankChanged, RankState
from ddptui.core.story.incident import Incident
from ddptui.ui.widgets.grid_cells import NodeRow, RankGridCell
from ddptui.ui.widgets.grid_layout import (
    COUNT_ORDER,
    Line,
    cell_at,
    cell_x,
    count_lines,
    count_looks,
    layout,
)


class RankSelected(Message):
    """The operator clicked a rank: the screen makes it the target of `jump to error`."""

    def __init__(self, node: str, local_rank: int) -> None:
        super().__init__()
        self.node = node
        self.local_rank = local_rank


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
        "rank-grid--stopped",
        "rank-grid--node-stopped",
        "rank-grid--hung",
        "rank-grid--restarting",
        "rank-grid--straggler",
        "rank-grid--gpu",
        "rank-grid--gpu-flag",
        "rank-grid--gpu-high",
        *(f"rank-grid--count-{look}" for look in COUNT_ORDER),
    }

    DEFAULT_CSS = """
    RankGrid {
        height: auto;
        padding: 0 1;
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
        & > .rank-grid--stopped  { background: $panel-lighten-2; color: $text; text-style: bold; }
        & > .rank-grid--node-stopped { color: $text-muted; }
        & > .rank-grid--hung     { background: $warning; color: $background; text-style: bold; }
        & > .rank-grid--restarting { background: $primary-darken-2; color: $text; }
        & > .rank-grid--straggler {
            background: $warning-darken-2; color: $text; text-style: bold;
        }
        & > .rank-grid--gpu { color: $text-muted; }
        & > .rank-grid--gpu-flag { color: $warning; text-style: bold; }
        & > .rank-grid--gpu-high { background: $error; color: $text; text-style: bold; }
        & > .rank-grid--count-running, & > .rank-grid--count-done { color: $success; }
        & > .rank-grid--count-failed { color: $error; text-style: bold; }
        & > .rank-grid--count-hung, & > .rank-grid--count-straggler { color: $warning; }
        & > .rank-grid--count-restarting { color: $primary; }
        & > .rank-grid--count-assigned, & > .rank-grid--count-pending { color: $text-muted; }
        & > .rank-grid--count-stopped { color: $text-muted; }
    }
    """

    def __init__(self, nodes: Sequence[str], nproc_per_node: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._build(nodes, nproc_per_node)

    def _build(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        self.nodes = list(nodes)
        self.nproc_per_node = nproc_per_node
        self._rows = {n: NodeRow(n, nproc_per_node) for n in self.nodes}
        self._lines: list[Line] = []
        # The width the lines were laid out for; -1: lay out again, -2: again, redrawing only
        # the lines that changed (if the width is the same).
        self._laid_out_at = -1
        self._strips: dict[int, Strip] = {}
        self._looks: list[tuple[object, ...]] = []  # what each line drew, to redraw only changes
        self._looks_at = -1  # the width they were drawn at
        self._redraw: set[int] | None = set()  # the lines changed since drawn; None: every line
        self._hovered: RankGridCell | None = None
        self._settling = False
        self._height = -1  # the number of lines the last layout made room for

    # -- feeding it ---------------------------------------------------------------------

    def set_nodes(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        """Rebuild the grid when the allocation names nodes the preview could not know."""
        if list(nodes) == self.nodes and nproc_per_node == self.nproc_per_node:
            return
        self._build(nodes, nproc_per_node)
        self._changed()

    def reset(self) -> None:
        """Fresh pending cells for a new run of the same job."""
        self._build(self.nodes, self.nproc_per_node)
        self._changed()

    def show_rank(self, event: RankChanged) -> None:
        self._show(event)
        self._changed()

    def show_ranks(self, changes: Iterable[RankChanged]) -> None:
        """Many changes, one new layout."""
        for event in changes:
            self._show(event)
        self._changed()

    def _show(self, event: RankChanged) -> None:
        cell = self.cell(event.node, event.local_rank)
        if cell is None:
            return
        cell.show(event)
        row = self._rows[event.node]
        if event.restarts > row.restarts:
            row.restarts = event.restarts
        if cell is self._hovered:
            self.tooltip = cell.tooltip

    def show_gpu(self, event: GpuReport) -> None:
        """A node's GPU sample: each rank's cell shows its GPU, and a flag the GPU raised."""
        row = self._rows.get(event.node)
        if row is None:
            return
        flags = {(f.gpu, f.rank): f for f in event.flags}
        on_gpu = {rank: gpu for gpu in event.gpus for rank in gpu.ranks}
        for cell in row.cells:
            gpu = on_gpu.get(cell.rank) if cell.rank is not None else None
            flag = None
            if gpu is not None:
                flag = flags.get((gpu.index, cell.rank)) or flags.get((gpu.index, None))
            cell.show_gpu(gpu, flag)
        if any(cell is self._hovered for cell in row.cells) and self._hovered is not None:
            self.tooltip = self._hovered.tooltip
        self._changed()

    def show_stragglers(self, report: StragglerReport) -> None:
        """The speed watch's named ranks marked (with their score), every other rank cleared."""
        scores = {s.rank: s.relative for s in report.scores}
        said = {
            rank: next((e for e in report.evidence if e.startswith(f"rank {rank} (")), "")
            for rank in report.ranks
        }
        for row in self._rows.values():
            for cell in row.cells:
                if cell.rank is not None and cell.rank in said:
                    cell.show_slow(scores.get(cell.rank), said[cell.rank])
                else:
                    cell.show_slow(None)
        if self._hovered is not None:
            self.tooltip = self._hovered.tooltip
        self._changed()

    def show_lead(self, lead: Incident | None) -> None:
        """The story's lead: the ranks it blames (Incident.marks) are marked with its kind, no
        other rank."""
        for row in self._rows.values():
            for cell in row.cells:
                marked = lead is not None and lead.marks(cell.node, cell.rank)
                cell.blamed = lead if marked else None
        if self._hovered is not None:
            self.tooltip = self._hovered.tooltip
        self._changed()

    def show_node(self, node: str, state: NodeState, exit_code: int | None) -> None:
        row = self._rows.get(node)
        if row is not None:
            row.state = state
            row.state_text = state.value if exit_code is None else f"{state.value} {exit_code}"
            self._changed()

    def select(self, node: str | None, local_rank: int = 0) -> None:
        """Mark one rank as the operator's choice (None: no choice); its node never folds."""
        for row in self._rows.values():
            for cell in row.cells:
                cell.selected = cell.node == node and cell.local_rank == local_rank
        self._changed()

    # -- reading it ---------------------------------------------------------------------

    def cell(self, node: str, local_rank: int) -> RankGridCell | None:
        row = self._rows.get(node)
        if row is None or not 0 <= local_rank < len(row.cells):
            return None
        return row.cells[local_rank]

    def find_rank(self, rank: int) -> RankGridCell | None:
        """The cell the rendezvous gave global rank `rank`, if it has."""
        for row in self._rows.values():
            for cell in row.cells:
                if cell.rank == rank:
                    return cell
        return None

    @property
    def rows(self) -> list[NodeRow]:
        return list(self._rows.values())

    def restarts(self) -> dict[str, int]:
        return {node: row.restarts for node, row in self._rows.items()}

    def states(self) -> dict[tuple[str, int], RankState]:
        return {(c.node, c.local_rank): c.state for row in self._rows.values() for c in row.cells}

    def counts(self) -> Counter[str]:
        """How many ranks have each look (`running`, `straggler`, `failed`...)."""
        return count_looks(self._rows.values())

    @property
    def lines(self) -> list[Line]:
        """What each line shows, at the width the grid has now: the counts per state, then
        the nodes."""
        return self._lay_out(self.size.width)

    def _lay_out(self, width: int) -> list[Line]:
        if width != self._laid_out_at:
            rows = list(self._rows.values())
            head = count_lines(count_looks(rows), width) if width > 0 else []
            self._lines = [*head, *layout(rows, width, self.nproc_per_node)]
            looks = [_look(line) for line in self._lines]
            compare = self._laid_out_at == -2 and width == self._looks_at
            if not compare or len(looks) != len(self._looks):
                self._strips.clear()
                self._redraw = None
            else:  # a line that looks as it did keeps its strip (one rank changed: one line)
                pairs = enumerate(zip(looks, self._looks, strict=True))
                changed = {y for y, (new, old) in pairs if new != old}
                for y in changed:
                    self._strips.pop(y, None)
                if self._redraw is not None:
                    self._redraw |= changed
            self._looks, self._looks_at = looks, width
            self._laid_out_at = width
        return self._lines

    def cell_at(self, x: int, y: int) -> RankGridCell | None:
        """The cell drawn at content offset (x, y), if any."""
        lines = self.lines
        return cell_at(lines[y], x) if 0 <= y < len(lines) else None

    def line_of(self, node: str, local_rank: int = 0) -> int | None:
        """The line a rank's cell is drawn on (None: folded into a range, or no such rank)."""
        cell = self.cell(node, local_rank)
        for y, line in enumerate(self.lines):
            if any(span.cell is cell for span in line):
                return y
        return None

    def cell_offset(self, node: str, local_rank: int) -> Offset:
        """Where a cell is drawn, relative to the widget (padding included): where to click."""
        cell = self.cell(node, local_rank)
        y = self.line_of(node, local_rank)
        x = cell_x(self.lines[y], cell) if y is not None and cell is not None else None
        if y is None or x is None:
            raise LookupError(f"{node} local rank {local_rank} is not drawn")
        return Offset(x + self.styles.padding.left, y + self.styles.padding.top)

    # -- drawing ------------------------------------------------------------------------

    def _changed(self) -> None:
        """Lay the lines out again, once for a burst of changes (384 node changes of a big
        job: one layout), and redraw only the lines that changed (a rank's state, a GPU
        sample: one line of many); the screen's layout only when the number of lines
        changed (a layout of a screen with a log pane per node is what costs)."""
        self._laid_out_at = -2  # not a width: the next layout compares line by line
        if not self._settling:
            self._settling = True
            self.call_later(self._settle)

    def _settle(self) -> None:
        self._settling = False
        width = self.size.width
        lines = self.lines
        redraw, self._redraw = self._redraw, set()
        if len(lines) != self._height:
            self.refresh(layout=True)
        elif redraw is None:
            self.refresh()
        elif redraw:
            self.refresh(*(Region(0, y, width, 1) for y in sorted(redraw)))

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return container.width

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._height = len(self._lay_out(width))
        return self._height

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def on_resize(self) -> None:
        self._laid_out_at = -1  # Textual redraws every line of a resized widget

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        lines = self.lines
        if y >= len(lines):
            return Strip.blank(width, self.rich_style)
        strip = self._strips.get(y)
        if strip is None:
            strip = self._strips[y] = self._draw(lines[y], width)
        return strip

    def _draw(self, line: Line, width: int) -> Strip:
        style = self.get_component_rich_style
        base = self.rich_style
        segments = []
        for span in line:
            name = f"rank-grid--{span.look}"
            if name not in self.COMPONENT_CLASSES:
                name = "rank-grid--node"  # a node state without colours of its own
            look = base if span.look is None else style(name)
            if span.cell is not None and span.cell.selected:
                look += Style(bold=True, reverse=True)
            segments.append(Segment(span.text, look))
        return Strip(segments).crop_extend(0, width, base)

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


def _look(line: Line) -> tuple[object, ...]:
    """Everything `_draw` draws a line from."""
    return tuple(
        (span.text, span.look, span.cell is not None and span.cell.selected) for span in line
    )
