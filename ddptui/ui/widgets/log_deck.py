"""Provides NodeLogDeck: one tab per node, each holding that node's NodeLogPane."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import TabbedContent, TabPane

from ddptui.core.events import NodeState
from ddptui.ui.widgets.node_log import NodeLogPane

_STATE_MARK = {
    NodeState.WAITING: "·",
    NodeState.CONNECTING: "…",
    NodeState.AUTHENTICATED: "…",
    NodeState.LAUNCHED: "○",
    NodeState.RUNNING: "▶",
    NodeState.EXITED: "✓",
    NodeState.FAILED: "✗",
    NodeState.STOPPING: "■",
    NodeState.DETACHED: "⇥",
}


class NodeLogDeck(Vertical):
    """The node logs, one visible at a time; the screen switches them and feeds them."""

    DEFAULT_CSS = """
    NodeLogDeck {
        & TabPane { padding: 0; }
        & NodeLogPane { border: round $primary-background; height: 1fr; overflow: auto; }
        & NodeLogPane:focus { border: round $primary; }
        & NodeLogPane.-failed { border: round $error; }
    }
    """

    def __init__(self, nodes: Sequence[str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.nodes = list(nodes)
        self._panes = self._make_panes(self.nodes)

    @staticmethod
    def _make_panes(nodes: Sequence[str]) -> dict[str, NodeLogPane]:
        return {node: NodeLogPane(node, id=f"log-{i}") for i, node in enumerate(nodes)}

    @staticmethod
    def _tab_id(index: int) -> str:
        return f"node-{index}"

    def compose(self) -> ComposeResult:
        with TabbedContent():
            for index, (node, pane) in enumerate(self._panes.items()):
                with TabPane(node, id=self._tab_id(index)):
                    yield pane

    async def set_nodes(self, nodes: Sequence[str]) -> None:
        """Rebuild the tabs when the allocation names nodes the preview could not know."""
        if list(nodes) == self.nodes:
            return
        self.nodes = list(nodes)
        self._panes = self._make_panes(self.nodes)
        await self.recompose()

    def pane(self, node: str) -> NodeLogPane | None:
        return self._panes.get(node)

    @property
    def active_node(self) -> str | None:
        active = self.query_one(TabbedContent).active
        for index, node in enumerate(self.nodes):
            if self._tab_id(index) == active:
                return node
        return None

    def write(self, node: str, lines: list[str], dropped: int = 0) -> None:
        pane = self._panes.get(node)
        if pane is not None:
            pane.append_batch(lines, dropped)

    def show_state(self, node: str, state: NodeState, exit_code: int | None) -> None:
        pane = self._panes.get(node)
        if pane is None:
            return
        pane.show_state(state, exit_code)
        index = self.nodes.index(node)
        tabs = self.query_one(TabbedContent)
        tabs.get_tab(self._tab_id(index)).label = f"{node} {_STATE_MARK.get(state, '')}".strip()

    def clear(self) -> None:
        """Empty every pane for a new run of the job."""
        tabs = self.query_one(TabbedContent)
        for index, (node, pane) in enumerate(self._panes.items()):
            pane.restart()
            tabs.get_tab(self._tab_id(index)).label = node

    def step(self, delta: int) -> None:
        """Show the next (+1) or previous (-1) node's log, and focus it for scrolling."""
        if not self.nodes:
            return
        active = self.active_node
        current = self.nodes.index(active) if active is not None else 0
        index = (current + delta) % len(self.nodes)
        self.query_one(TabbedContent).active = self._tab_id(index)
        self._panes[self.nodes[index]].focus()
