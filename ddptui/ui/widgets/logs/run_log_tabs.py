"""Provides RunLogTabs: a past run's node logs, one tab per node, as its run directory kept them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, Log

from ddptui.core.runs.node_log import MAX_LINES, read_node_log
from ddptui.ui.widgets.logs.log_tabs import LogTabBar


class RunLogTabs(Vertical):
    """Read-only logs; the screen hands it the files and switches tabs. One tab bar and
    one log shown whatever the number of nodes, as in the live deck."""

    DEFAULT_CSS = """
    RunLogTabs {
        & ContentSwitcher { height: 1fr; }
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
        self._index = 0

    def compose(self) -> ComposeResult:
        yield LogTabBar([node for node, _path in self.logs], id="past-log-tabs")
        initial = "past-log-0" if self.logs else None
        with ContentSwitcher(initial=initial, id="past-log-views"):
            yield from self.views.values()

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
        return self.logs[self._index][0] if self.logs else None

    def step(self, delta: int) -> None:
        if not self.logs:
            return
        self._select((self._index + delta) % len(self.logs))

    @on(LogTabBar.Selected)
    def _tab_clicked(self, event: LogTabBar.Selected) -> None:
        event.stop()
        self._select(event.index)

    def _select(self, index: int) -> None:
        self._index = index
        self.query_one(LogTabBar).active = index
        self.query_one(ContentSwitcher).current = f"past-log-{index}"
        self.views[self.logs[index][0]].focus()
