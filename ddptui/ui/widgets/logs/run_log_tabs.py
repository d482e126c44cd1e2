"""Provides RunLogTabs: a past run's node logs, one tab per node, as its run directory kept them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, TabbedContent, TabPane

from ddptui.core.runs.node_log import MAX_LINES, read_node_log


class RunLogTabs(Vertical):
    """Read-only logs; the screen hands it the files and switches tabs."""

    DEFAULT_CSS = """
    RunLogTabs {
        & TabPane { padding: 0; }
        & Log { border: round $primary-background; height: 1fr; }
        & Log:focus { border: round $primary; }
    }
    """

    def __init__(self, logs: Sequence[tuple[str, Path]], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.logs = list(logs)
        self.loaded = False
        self.views = {
            node: Log(max_lines=MAX_LINES, id=f"past-log-{i}")
            for i, (node, _p) in enumerate(self.logs)
        }

    def compose(self) -> ComposeResult:
        with TabbedContent():
            for i, (node, _path) in enumerate(self.logs):
                with TabPane(node, id=f"past-node-{i}"):
                    yield self.views[node]

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, group="past-logs")
    def _load(self) -> None:
        """Files can be large: read them off the event loop, then hand each to its view."""
        for node, path in self.logs:
            lines = read_node_log(path)
            self.app.call_from_thread(self._show, node, lines)
        self.loaded = True

    def _show(self, node: str, lines: list[str]) -> None:
        self.views[node].write_lines(lines)
        self.views[node].scroll_home(animate=False)

    def text(self, node: str) -> str:
        return "\n".join(self.views[node].lines)

    @property
    def active_node(self) -> str | None:
        active = self.query_one(TabbedContent).active
        for i, (node, _path) in enumerate(self.logs):
            if active == f"past-node-{i}":
                return node
        return None

    def step(self, delta: int) -> None:
        if not self.logs:
            return
        nodes = [node for node, _p in self.logs]
        current = nodes.index(self.active_node) if self.active_node in nodes else 0
        index = (current + delta) % len(nodes)
        self.query_one(TabbedContent).active = f"past-node-{index}"
        self.views[nodes[index]].focus()
