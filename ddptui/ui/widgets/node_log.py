"""Provides NodeLogPane: one node's output, a lazily rendered Log fed in batches."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.widgets import Log

from ddptui.core.events import NodeState

DEFAULT_MAX_LINES = 20_000


class NodeLogPane(Log, inherit_bindings=False):
    """A node's log. Textual's scroll bindings carry no ids, so they are redeclared with ids.

    It follows new lines until the operator scrolls up, and again once they are back at the
    end. Log's own auto-scroll is not used: it stops for good when the horizontal scrollbar
    appears a moment after a write (the width is measured in a thread) and the view is left
    one row short of the end.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_up", "Scroll up", show=False, id="logs.scroll_up"),
        Binding("down", "scroll_down", "Scroll down", show=False, id="logs.scroll_down"),
        Binding("pageup", "page_up", "Page up", show=False, id="logs.page_up"),
        Binding("pagedown", "page_down", "Page down", show=False, id="logs.page_down"),
        Binding("home", "scroll_home", "Top of log", show=False, id="logs.top"),
        Binding("end", "scroll_end", "End of log (follow)", show=False, id="logs.bottom"),
    ]

    def __init__(
        self, node: str, *, max_lines: int = DEFAULT_MAX_LINES, id: str | None = None
    ) -> None:
        super().__init__(max_lines=max_lines, auto_scroll=True, id=id)
        self.node = node
        self.node_state: NodeState | None = None
        self.lines_written = 0
        self.lines_dropped = 0
        self.following = True
        self._update_title()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value >= self.max_scroll_y:
            self.following = True
        elif new_value < old_value:
            self.following = False

    def watch_virtual_size(self, size: Size) -> None:
        if self.following:
            self.scroll_end(animate=False, x_axis=False)

    def append_batch(self, lines: list[str], dropped: int = 0) -> None:
        """Write one timer tick's worth of lines in a single call."""
        if dropped:
            self.lines_dropped += dropped
            lines = [f"… {dropped} line(s) skipped here (the run directory has them all)", *lines]
        if lines:
            self.write_lines(lines, scroll_end=False)
            self.lines_written += len(lines)
        if dropped:
            self._update_title()

    def restart(self) -> None:
        """Empty the pane for a new run of the job."""
        self.clear()
        self.node_state = None
        self.lines_written = self.lines_dropped = 0
        self.remove_class("-failed")
        self._update_title()

    def show_state(self, state: NodeState, exit_code: int | None) -> None:
        self.node_state = state
        self.set_class(state == NodeState.FAILED, "-failed")
        self._update_title(exit_code)

    def _update_title(self, exit_code: int | None = None) -> None:
        state = self.node_state.value if self.node_state else "not launched"
        if exit_code is not None:
            state += f" (exit {exit_code})"
        self.border_title = f"{self.node} · {state}"
        self.border_subtitle = f"{self.lines_dropped} line(s) skipped" if self.lines_dropped else ""
