"""Provides RankGrid: one row per node, one cell per local rank, coloured by rank state."""

from __future__ import annotations

import time
from collections.abc import Sequence

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

from ddptui.core.diagnosis import signal_name
from ddptui.core.events import Diagnosis, NodeState, RankChanged, RankState

_GLYPH = {
    RankState.PENDING: "·",
    RankState.ASSIGNED: "○",
    RankState.RUNNING: "▶",
    RankState.DONE: "✓",
    RankState.FAILED: "✗",
    RankState.HUNG: "!",
}


class RankSelected(Message):
    """The operator clicked a rank: the screen makes it the target of `jump to error`."""

    def __init__(self, node: str, local_rank: int) -> None:
        super().__init__()
        self.node = node
        self.local_rank = local_rank


class RankCell(Static):
    """One (node, local rank); labelled `L<local>` until the rendezvous gives its global rank.

    A failed rank shows its exit code, or the signal that killed it (`SIGKILL` for -9/137);
    a hung one is amber, a straggler orange.
    """

    DEFAULT_CSS = """
    RankCell {
        width: 12;
        height: 1;
        margin-right: 1;
        content-align: center middle;
        text-style: bold;
        &.-pending  { background: $panel; color: $text-muted; text-style: dim; }
        &.-assigned { background: $primary-darken-1; color: $text; }
        &.-running  { background: $success; color: $text; }
        &.-done     { background: $success-darken-3; color: $text; }
        &.-failed   { background: $error; color: $text; }
        &.-hung     { background: $warning; color: $background; }
        &.-straggler { background: $warning-darken-2; color: $text; }
        &.-selected { text-style: bold reverse; }
    }
    """

    state: reactive[RankState] = reactive(RankState.PENDING)

    def __init__(self, node: str, local_rank: int) -> None:
        super().__init__()
        self.node = node
        self.local_rank = local_rank
        self.rank: int | None = None
        self.exit_code: int | None = None
        self.detail = ""
        self.diagnoses: tuple[Diagnosis, ...] = ()
        self.restarts = 0
        self.straggler = False
        self.history: list[tuple[float, RankState]] = [(time.time(), RankState.PENDING)]

    @property
    def label(self) -> str:
        return f"r{self.rank}" if self.rank is not None else f"L{self.local_rank}"

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
        self.set_class(self.straggler, "-straggler")
        self.tooltip = self._tooltip_text()
        self.refresh()

    def watch_state(self, old: RankState, new: RankState) -> None:
        self.remove_class(f"-{old.value}")
        self.add_class(f"-{new.value}")

    def render(self) -> str:
        glyph = _GLYPH[self.state]
        if self.state == RankState.FAILED and self.exit_code is not None:
            return f"{self.label} {glyph}{signal_name(self.exit_code) or self.exit_code}"
        if self.straggler:
            return f"{self.label} {glyph}slow"
        return f"{self.label} {glyph}"

    def on_click(self, event: events.Click) -> None:
        self.post_message(RankSelected(self.node, self.local_rank))

    def on_mount(self) -> None:
        self.add_class(f"-{self.state.value}")
        self.tooltip = self._tooltip_text()

    def _tooltip_text(self) -> str:
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


class NodeRow(Horizontal):
    """A node's name, its agent's state, and its ranks."""

    DEFAULT_CSS = """
    NodeRow {
        height: 1;
        margin-bottom: 1;
        & > .node-name  { width: 14; text-style: bold; }
        & > .node-state { width: 11; color: $text-muted; }
        & > .node-restarts { width: 5; color: $warning; }
        & > .node-state.-running  { color: $success; }
        & > .node-state.-exited   { color: $success; }
        & > .node-state.-failed   { color: $error; }
        & > .node-state.-stopping { color: $warning; }
    }
    """

    def __init__(self, node: str, nproc_per_node: int) -> None:
        super().__init__()
        self.node = node
        self.cells = [RankCell(node, lr) for lr in range(nproc_per_node)]
        self._state = Static("—", classes="node-state")
        self._restarts = Static("", classes="node-restarts")
        self.restarts = 0

    def compose(self) -> ComposeResult:
        yield Static(self.node, classes="node-name")
        yield self._state
        yield self._restarts
        yield from self.cells

    def show_restarts(self, restarts: int) -> None:
        """torchrun restarted this node's workers (--max-restarts): `↻2`."""
        if restarts > self.restarts:
            self.restarts = restarts
            self._restarts.update(f"↻{restarts}")
            self._restarts.tooltip = f"workers restarted {restarts} time(s) by torchrun"

    def show_state(self, state: NodeState, exit_code: int | None) -> None:
        text = state.value if exit_code is None else f"{state.value} {exit_code}"
        self._state.update(text)
        self._state.set_classes(f"node-state -{state.value}")


class RankGrid(Vertical):
    """Nodes by local ranks; the screen feeds it rank and node changes."""

    DEFAULT_CSS = """
    RankGrid {
        height: auto;
        padding: 1 1 0 1;
    }
    """

    def __init__(self, nodes: Sequence[str], nproc_per_node: int, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.nodes = list(nodes)
        self.nproc_per_node = nproc_per_node
        self._rows = {n: NodeRow(n, nproc_per_node) for n in self.nodes}

    def compose(self) -> ComposeResult:
        yield from self._rows.values()

    async def set_nodes(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        """Rebuild the grid when the allocation names nodes the preview could not know."""
        if list(nodes) == self.nodes and nproc_per_node == self.nproc_per_node:
            return
        self.nodes = list(nodes)
        self.nproc_per_node = nproc_per_node
        self._rows = {n: NodeRow(n, nproc_per_node) for n in self.nodes}
        await self.recompose()

    async def reset(self) -> None:
        """Fresh pending cells for a new run of the same job."""
        self._rows = {n: NodeRow(n, self.nproc_per_node) for n in self.nodes}
        await self.recompose()

    def show_rank(self, event: RankChanged) -> None:
        cell = self.cell(event.node, event.local_rank)
        if cell is not None:
            cell.show(event)
        row = self._rows.get(event.node)
        if row is not None and event.restarts:
            row.show_restarts(event.restarts)

    def select(self, node: str | None, local_rank: int = 0) -> None:
        """Mark one rank as the operator's choice (None: no choice)."""
        for row in self._rows.values():
            for cell in row.cells:
                cell.set_class(cell.node == node and cell.local_rank == local_rank, "-selected")

    def show_node(self, node: str, state: NodeState, exit_code: int | None) -> None:
        row = self._rows.get(node)
        if row is not None:
            row.show_state(state, exit_code)

    def cell(self, node: str, local_rank: int) -> RankCell | None:
        row = self._rows.get(node)
        if row is None or not 0 <= local_rank < len(row.cells):
            return None
        return row.cells[local_rank]

    def restarts(self) -> dict[str, int]:
        return {node: row.restarts for node, row in self._rows.items()}

    def states(self) -> dict[tuple[str, int], RankState]:
        return {(c.node, c.local_rank): c.state for row in self._rows.values() for c in row.cells}
