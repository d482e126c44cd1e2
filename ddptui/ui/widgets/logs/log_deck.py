"""Provides NodeLogDeck: a log view per node plus the merged view of all, and their settings."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, Static

from ddptui.core.events import NodeState
from ddptui.ui.widgets.logs.log_entry import LogEntry
from ddptui.ui.widgets.logs.log_filter import LogFilter, compile_pattern
from ddptui.ui.widgets.logs.log_store import LogStore, skipped_note
from ddptui.ui.widgets.logs.log_tabs import LogTabBar
from ddptui.ui.widgets.logs.log_view import DEFAULT_MAX_LINES, LogView

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
        & ContentSwitcher { height: 1fr; }
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
        self._status = Static("", id="log-status")
        self._make_views()

    def _make_views(self) -> None:
        """A view per node and the merged one, the tab bar naming them, the first showing."""
        self._panes = {
            node: LogView(node, self.store, node=node, max_lines=self.max_lines, id=f"log-{i}")
            for i, node in enumerate(self.nodes)
        }
        self._merged = LogView(MERGED_LABEL, self.store, max_lines=self.max_lines, id="log-all")
        self._active = self.views[0]
        self._bar = LogTabBar([*self.nodes, MERGED_LABEL], id="log-tabs")
        self._switcher = ContentSwitcher(initial=self._active.id, id="log-views")
        self._update_titles()

    def compose(self) -> ComposeResult:
        yield self._bar
        with self._switcher:
            yield from self.views
        yield self._status

    def on_mount(self) -> None:
        self._show_status()

    async def set_nodes(self, nodes: Sequence[str]) -> None:
        """Rebuild the tabs when the allocation names nodes the preview could not know."""
        if list(nodes) == self.nodes:
            return
        self.nodes = list(nodes)
        self._make_views()
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
        return self._active

    @property
    def tab_bar(self) -> LogTabBar:
        return self._bar

    @property
    def active_node(self) -> str | None:
        """The node whose log shows; None while the merged view shows."""
        return self.active_view.node

    def show(self, node: str | None) -> LogView:
        """Show a node's log (None: the merged view) and focus it for scrolling."""
        view = self._panes.get(node) if node is not None else self._merged
        view = view or self._merged
        view.catch_up()
        self._active = view  # one view shown, another hidden: no query, no tab laid out
        self._switcher.current = view.id
        self._bar.active = self.views.index(view)
        view.focus()
        self._show_status()
        return view

    def step(self, delta: int) -> None:
        """Show the next (+1) or previous (-1) log; the merged view comes after the last node."""
        order: list[str | None] = [*self.nodes, None]
        current = order.index(self.active_node)
        self.show(order[(current + delta) % len(order)])

    @on(LogTabBar.Selected)
    def _tab_clicked(self, event: LogTabBar.Selected) -> None:
        event.stop()
        self.show([*self.nodes, None][event.index])

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

    def add_notes(self, notes: Sequence[LogEntry]) -> None:
        """The console's notes, each after the line of its node that it is about (`seq`),
        even where later lines are on screen already; the views that show a note placed
        before their newest lines show the store again."""
        placed = [bool(note.seq) and self.store.place(note) for note in notes]
        self.append([note for note, put in zip(notes, placed, strict=True) if not put])
        late = {note.node for note, put in zip(notes, placed, strict=True) if put}
        for view in self.views:
            if late and (not view.log_filter.nodes or late & view.log_filter.nodes):
                view.rebuild()

    def clear(self) -> None:
        """Empty every view for a new run of the job."""
        self.store.clear()
        self.node_states.clear()
        for index, (node, pane) in enumerate(self._panes.items()):
            pane.restart()
            pane.remove_class("-failed")
            self.tab_bar.set_label(index, node)
        self._merged.restart()
        self._update_titles()

    def show_state(self, node: str, state: NodeState, exit_code: int | None) -> None:
        pane = self._panes.get(node)
        if pane is None:
            return
        self.node_states[node] = (state, exit_code)
        pane.set_class(state == NodeState.FAILED, "-failed")
        label = f"{node} {_STATE_MARK.get(state, '')}".strip()
        self.tab_bar.set_label(self.nodes.index(node), label, failed=state == NodeState.FAILED)
        self._update_title(node, pane)

    def _update_title(self, node: str, pane: LogView) -> None:
        state, code = self.node_states.get(node, (None, None))
        text = state.value if state is not None else "not launched"
        if code is not None:
            text += f" (exit {code})"
        pane.set_titles(f"{node} · {text}", self._subtitle())

    def _subtitle(self) -> str:
        return f"window: newest {self.max_lines} lines" if self.store.dropped else ""

    def _update_titles(self) -> None:
        for node, pane in self._panes.items():
            self._update_title(node, pane)
        self._merged.set_titles(f"{MERGED_LABEL} · node/rank prefixes", self._subtitle())

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
        """Whether some logs' tabs are out of sight: then the status line says which of how
        many logs shows."""
        return self.tab_bar.cut


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
