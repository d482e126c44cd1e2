"""Provides NodeLogDeck: a log view per node plus the merged view of all, and their settings."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static, Tab, TabbedContent, TabPane, Tabs

from ddptui.core.events import NodeState
from ddptui.ui.widgets.logs.log_filter import LogFilter, compile_pattern
from ddptui.ui.widgets.logs.log_store import LogEntry, LogStore, skipped_note
from ddptui.ui.widgets.logs.log_view import DEFAULT_MAX_LINES, LogView

MERGED_TAB = "all-nodes"
MERGED_LABEL = "all nodes"
_STATE_MARK = {
    NodeState.WAITING: "·",
    NodeState.CONNECTING: "…",
    NodeState.AUTHENTICATED: "…",
    NodeState.LAUNCHED: "○",
    NodeState.RUNNING: "▶",
    NodeState.EXITED: "✓",
    NodeState.FAILED: "✗",
    NodeState.STOPPING: "■",
    NodeState.STOPPED: "□",
    NodeState.DETACHED: "⇥",
}


class NodeLogDeck(Vertical):
    """The node logs and the merged log, one visible at a time; the screen drives it.

    Every entry goes into one bounded LogStore (the full logs are on disk) and into the views
    that can show it: its node's pane (or a pane whose filter names the node) and the merged
    view. Wrapping, timestamps and following apply to every view; the filter and the search
    belong to the view that is showing.
    """

    DEFAULT_CSS = """
    NodeLogDeck {
        & TabbedContent { height: 1fr; }
        & TabPane { padding: 0; }
        & LogView { border: round $primary-background; height: 1fr; overflow: auto; }
        & LogView:focus { border: round $primary; }
        & LogView.-failed { border: round $error; }
        & #log-status {
            height: 1; padding: 0 1; color: $text-muted; background: $panel;
            text-wrap: nowrap; text-overflow: ellipsis;
        }
    }
    """

    def __init__(
        self, nodes: Sequence[str], *, max_lines: int = DEFAULT_MAX_LINES, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.nodes = list(nodes)
        self.max_lines = max_lines
        self.store = LogStore(max_lines)
        self.node_states: dict[str, tuple[NodeState, int | None]] = {}
        self.saved_to: Path | None = None
        self._panes = self._make_panes(self.nodes)
        self._merged = LogView(MERGED_LABEL, self.store, max_lines=max_lines, id="log-all")
        self._status = Static("", id="log-status")
        self._update_titles()

    def _make_panes(self, nodes: Sequence[str]) -> dict[str, LogView]:
        return {
            node: LogView(node, self.store, node=node, max_lines=self.max_lines, id=f"log-{i}")
            for i, node in enumerate(nodes)
        }

    @staticmethod
    def _tab_id(index: int) -> str:
        return f"node-{index}"

    def compose(self) -> ComposeResult:
        with TabbedContent():
            for index, (node, pane) in enumerate(self._panes.items()):
                with TabPane(node, id=self._tab_id(index)):
                    yield pane
            with TabPane(MERGED_LABEL, id=MERGED_TAB):
                yield self._merged
        yield self._status

    def on_mount(self) -> None:
        self._show_status()

    async def set_nodes(self, nodes: Sequence[str]) -> None:
        """Rebuild the tabs when the allocation names nodes the preview could not know."""
        if list(nodes) == self.nodes:
            return
        self.nodes = list(nodes)
        self._panes = self._make_panes(self.nodes)
        self._merged = LogView(MERGED_LABEL, self.store, max_lines=self.max_lines, id="log-all")
        self._update_titles()
        await self.recompose()
        for view in self.views:
            view.rebuild()

    # -- the views --------------------------------------------------------------------------

    @property
    def views(self) -> list[LogView]:
        return [*self._panes.values(), self._merged]

    @property
    def merged_view(self) -> LogView:
        return self._merged

    def pane(self, node: str) -> LogView | None:
        return self._panes.get(node)

    @property
    def active_view(self) -> LogView:
        active = self.query_one(TabbedContent).active
        for index, node in enumerate(self.nodes):
            if self._tab_id(index) == active:
                return self._panes[node]
        return self._merged

    @property
    def active_node(self) -> str | None:
        """The node whose log shows; None while the merged view shows."""
        return self.active_view.node

    def show(self, node: str | None) -> LogView:
        """Show a node's log (None: the merged view) and focus it for scrolling."""
        view = self._panes.get(node) if node is not None else self._merged
        view = view or self._merged
        tab = MERGED_TAB if view is self._merged else self._tab_id(self.nodes.index(node or ""))
        view.catch_up()
        self.query_one(TabbedContent).active = tab
        view.focus()
        self._show_status()
        return view

    def step(self, delta: int) -> None:
        """Show the next (+1) or previous (-1) log; the merged view comes after the last node."""
        order: list[str | None] = [*self.nodes, None]
        current = order.index(self.active_node)
        self.show(order[(current + delta) % len(order)])

    @on(TabbedContent.TabActivated)
    def _tab_changed(self) -> None:
        self._show_status()

    @on(LogView.Changed)
    def _view_changed(self, event: LogView.Changed) -> None:
        event.stop()
        if event.view is self.active_view:
            self._show_status()

    # -- lines in ---------------------------------------------------------------------------

    def append(self, entries: Sequence[LogEntry], dropped: Mapping[str, int] | None = None) -> None:
        """One timer tick's lines; `dropped` counts what the relay could not keep, per node."""
        notes = [skipped_note(node, count) for node, count in (dropped or {}).items() if count]
        batch = [*notes, *entries] if notes else list(entries)
        if not batch:
            return
        self.store.extend(batch)
        by_node: dict[str, list[LogEntry]] = {}
        for entry in batch:
            by_node.setdefault(entry.node, []).append(entry)
        for view in self.views:
            routed = _entries_for(view.log_filter.nodes, batch, by_node)
            if routed:
                view.append(routed)
        if notes:
            self._update_titles()

    def clear(self) -> None:
        """Empty every view for a new run of the job."""
        self.store.clear()
        self.node_states.clear()
        tabs = self.query_one(TabbedContent)
        for index, (node, pane) in enumerate(self._panes.items()):
            pane.restart()
            pane.remove_class("-failed")
            tabs.get_tab(self._tab_id(index)).label = node
        self._merged.restart()
        self._update_titles()

    def show_state(self, node: str, state: NodeState, exit_code: int | None) -> None:
        pane = self._panes.get(node)
        if pane is None:
            return
        self.node_states[node] = (state, exit_code)
        pane.set_class(state == NodeState.FAILED, "-failed")
        index = self.nodes.index(node)
        tab = self.query_one(TabbedContent).get_tab(self._tab_id(index))
        _relabel(tab, f"{node} {_STATE_MARK.get(state, '')}".strip())
        self._update_title(node, pane)

    def _update_title(self, node: str, pane: LogView) -> None:
        state, code = self.node_states.get(node, (None, None))
        text = state.value if state is not None else "not launched"
        if code is not None:
            text += f" (exit {code})"
        pane.border_title = f"{node} · {text}"

    def _update_titles(self) -> None:
        for node, pane in self._panes.items():
            self._update_title(node, pane)
        self._merged.border_title = f"{MERGED_LABEL} · node/rank prefixes"
        skipped = self.store.dropped
        for view in self.views:
            view.border_subtitle = f"window: newest {self.max_lines} lines" if skipped else ""

    # -- the operator's settings ------------------------------------------------------------

    def set_filter(self, text: str) -> LogFilter:
        """Filter the showing view: `node:N rank:R regex`; raises FilterError on bad input."""
        log_filter = LogFilter.parse(text, self.nodes)
        self.active_view.set_filter(log_filter)
        self._show_status()
        return log_filter

    def search(self, text: str) -> int:
        """Search the showing view; returns the number of matching rows."""
        pattern = compile_pattern(text)
        count = self.active_view.set_search(pattern)
        self._show_status()
        return count

    def find(self, direction: int) -> bool:
        view = self.active_view
        if view.search_pattern is None:
            return False
        found = view.find(direction)
        self._show_status()
        return found

    def toggle_follow(self) -> bool:
        view = self.active_view
        view.set_following(not view.following)
        return view.following

    def toggle_wrap(self) -> bool:
        wrap = not self.active_view.wrap
        for view in self.views:
            view.set_wrap(wrap)
        return wrap

    def toggle_agent_lines(self) -> bool:
        """torchrun's own lines shown or hidden, in every view (they stay on disk)."""
        shown = not self.active_view.agent_lines
        for view in self.views:
            view.set_agent_lines(shown)
        self._show_status()
        return shown

    def toggle_fold(self) -> bool:
        """The merged view folds lines repeated across ranks, or shows each."""
        fold = not self._merged.fold
        self._merged.set_fold(fold)
        self._show_status()
        return fold

    def toggle_timestamps(self) -> bool:
        stamps = not self.active_view.timestamps
        for view in self.views:
            view.set_timestamps(stamps)
        return stamps

    def jump_to(self, node: str, seq: int) -> bool:
        """Show `node`'s log at its line `seq`; shows torchrun's lines, then clears that
        view's filter, if they hide the line."""
        view = self.show(node if node in self._panes else None)
        if view.jump_to(node, seq):
            return True
        if not view.agent_lines:  # the line may be torchrun's own: show those
            self.toggle_agent_lines()
            if view.jump_to(node, seq):
                return True
        if view.user_filter.active:
            view.set_filter(LogFilter())
            return view.jump_to(node, seq)
        return False

    def save(self, directory: Path) -> Path:
        """Write what the showing view holds, as shown, to a new file in `directory`."""
        view = self.active_view
        directory.mkdir(parents=True, exist_ok=True)
        stem = (view.node or "all-nodes").replace("/", "_")
        path = directory / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        n = 1
        while path.exists():
            n += 1
            path = directory / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{n}.log"
        lines = view.visible_text()
        path.write_text("\n".join(lines) + ("\n" if lines else ""))
        self.saved_to = path
        self._show_status()
        return path

    def _show_status(self) -> None:
        if not self.is_mounted:
            return
        # One row of fixed height: no layout of the whole screen for a new status.
        view = self.active_view
        place = (self.views.index(view) + 1, len(self.views)) if self._tabs_cut() else None
        self._status.update(describe_view(view, self.saved_to, place), layout=False)

    def on_resize(self) -> None:
        self._show_status()

    def _tabs_cut(self) -> bool:
        """Whether the tab bar is wider than the deck, so that some logs' tabs are out of
        sight: then the status line says which of how many logs shows. The tabs are read from
        the bar's own row: a query of the deck for them also walked every log view's widgets
        (at 512 nodes, ~40 ms a look, and a tab switch looks twice)."""
        tabbed = next((c for c in self.children if isinstance(c, TabbedContent)), None)
        bar = next((c for c in tabbed.children if isinstance(c, Tabs)), None) if tabbed else None
        if bar is None:
            return False
        row = bar.query_one("#tabs-list")  # where Tabs keeps its tabs (Tabs.add_tab mounts there)
        wanted = sum(t.label.cell_length + 2 for t in row.children if isinstance(t, Tab))
        return wanted > self.size.width  # each tab is padded by one cell on either side


def _relabel(tab: Tab, label: str) -> None:
    """Give a tab a new label. `Tab.label` lays out the whole screen each time, and a launch
    changes every node's mark several times (at 64 nodes, hundreds of layouts); a label as
    wide as the one it replaces cannot move anything, so it is only redrawn."""
    content = Content(label)
    if content.cell_length != tab.label.cell_length:
        tab.label = label
        return
    tab._label = content  # what Tab.label reads back
    Static.update(tab, content, layout=False)


def _entries_for(
    nodes: frozenset[str], batch: list[LogEntry], by_node: Mapping[str, list[LogEntry]]
) -> list[LogEntry]:
    """What a view showing `nodes` (empty: every node) gets of a batch, in order: a node's
    pane only its node's entries, so that 16 nodes do not cost every view 16 times the work."""
    if not nodes:
        return batch
    if len(nodes) == 1:
        (node,) = nodes
        return by_node.get(node, [])
    return [entry for entry in batch if entry.node in nodes]


def describe_view(
    view: LogView, saved_to: Path | None = None, place: tuple[int, int] | None = None
) -> Text:
    """The status line under the logs: which view (`place`: the Nth of M logs), its filter
    and search, the toggles."""
    text = Text()
    text.append(view.label, style="bold")
    if place is not None:
        text.append(f" ({place[0]}/{place[1]})")

    def flag(name: str, on: bool) -> None:
        text.append(f"  {name} ")
        text.append("on" if on else "off", style="bold green" if on else "dim")

    flag("follow", view.following)
    flag("wrap", view.wrap)
    flag("time", view.timestamps)
    flag("agent", view.agent_lines)
    if view.merged:
        flag("fold", view.fold)
    if view.user_filter.active:
        text.append("  filter ", style="bold")
        text.append(view.user_filter.describe(), style="cyan")
    if view.search_pattern is not None:
        text.append(f"  /{view.search_pattern.pattern}", style="yellow")
        text.append(f" {view.matches} match(es)")
    if view.prefix_armed:
        text.append("  g…", style="bold reverse")
    if saved_to is not None:
        text.append(f"  saved {saved_to}", style="dim")
    return text
