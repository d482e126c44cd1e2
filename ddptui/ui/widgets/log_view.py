"""Provides LogView: a lazily rendered, bounded log of one node (or all) with filter and search."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.actions import SkipAction
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Log

from ddptui.ui.logmodel import LogEntry, LogFilter, LogStore, format_entry, wrap_rows
from ddptui.ui.widgets.log_rows import (
    CURRENT_ROW_STYLE,
    MATCH_STYLE,
    NOTE_STYLE,
    ROW_FIRST,
    ROW_NODE,
    ROW_NOTE,
    ROW_PREFIX,
    ROW_RANK,
    ROW_SEQ,
    TARGET_ROW_STYLE,
    Row,
    displayable,
    entry_fields_of,
    rank_style,
    row_fields,
    row_of,
)

DEFAULT_MAX_LINES = 20_000


class LogView(Log, inherit_bindings=False):
    """One log view: a node's output, or every node's merged with `node/rank` prefixes.

    The view keeps at most `max_lines` rows (Log prunes the oldest); the deck's LogStore holds
    the entries it rebuilds from when the filter, wrapping or timestamps change. Textual's
    scroll bindings carry no ids, so they are redeclared with ids here.

    It follows new lines until the operator scrolls up (a key or the wheel stops following
    before it scrolls), and again once they are back at the end or press `end`. Log's own
    auto-scroll is not used: it stops for good when a horizontal scrollbar appears after a
    write.

    `g` is a prefix key: `logs.g` arms it and a `logs.g.*` binding fires only on the very next
    key press (vim's `gg`). Key presses are counted in `on_key`, which runs their bindings
    there rather than after the bubbling (never `if key == ...`).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        # Before logs.g: while the prefix is armed, the second key lands here.
        Binding("g", "after_g('top')", "Top of log (after g)", show=False, id="logs.g.top"),
        Binding("g", "arm_g", "Prefix g (g g: top)", show=False, id="logs.g"),
        Binding("up", "scroll_up", "Scroll up", show=False, id="logs.scroll_up"),
        Binding("down", "scroll_down", "Scroll down", show=False, id="logs.scroll_down"),
        Binding("left", "scroll_left", "Scroll left", show=False, id="logs.scroll_left"),
        Binding("right", "scroll_right", "Scroll right", show=False, id="logs.scroll_right"),
        Binding("pageup", "page_up", "Page up", show=False, id="logs.page_up"),
        Binding("pagedown", "page_down", "Page down", show=False, id="logs.page_down"),
        Binding("home", "scroll_home", "Top of log", show=False, id="logs.top"),
        Binding("end", "scroll_end", "End of log (follow)", show=False, id="logs.bottom"),
    ]

    class Changed(Message):
        """Following, the search or the prefix state changed: the deck redraws its status."""

        def __init__(self, view: LogView) -> None:
            super().__init__()
            self.view = view

    def __init__(
        self,
        label: str,
        store: LogStore,
        *,
        node: str | None = None,
        max_lines: int = DEFAULT_MAX_LINES,
        id: str | None = None,
    ) -> None:
        super().__init__(max_lines=max_lines, auto_scroll=True, id=id)
        self.label = label
        self.node = node  # None: the merged view of every node
        self.store = store
        self.user_filter = LogFilter()
        self.wrap = False
        self.timestamps = False
        self.following = True
        self.search_pattern: re.Pattern[str] | None = None
        self.match_row: int | None = None
        self.matches = 0
        self.target: LogEntry | None = None
        self.lines_written = 0
        self._rows: list[Row] = []
        self._keys = 0
        self._armed_at: int | None = None
        self._wrap_width = 0
        self._catch_up_pending = False

    # -- what it shows ----------------------------------------------------------------------

    @property
    def merged(self) -> bool:
        return self.node is None

    @property
    def log_filter(self) -> LogFilter:
        base = frozenset({self.node}) if self.node is not None else frozenset()
        return LogFilter(base | self.user_filter.nodes, self.user_filter.ranks,
                         self.user_filter.pattern)  # fmt: skip

    def _rows_for(self, entries: Iterable[LogEntry]) -> tuple[list[Row], list[str]]:
        """The rows and texts of the entries the filter takes; the hot path of a flood, so
        a filter that only names nodes is a set lookup and an unwrapped line one row."""
        log_filter = self.log_filter
        if log_filter.ranks or log_filter.pattern is not None:
            entries = [entry for entry in entries if log_filter.accepts(entry)]
        elif log_filter.nodes:
            nodes = log_filter.nodes
            entries = [entry for entry in entries if entry.node in nodes]
        merged, timestamps = self.merged, self.timestamps
        width = self._wrap_width if self.wrap else 0
        rows: list[Row] = []
        texts: list[str] = []
        add_row, add_text = rows.append, texts.append
        for entry in entries:
            formatted = format_entry(entry, merged=merged, timestamps=timestamps)
            text = displayable(formatted.text)
            pieces = wrap_rows(text, width) if width else None
            if pieces is None or len(pieces) == 1:
                add_row(row_of(entry, formatted.prefix, True))
                add_text(text)
                continue
            for i, piece in enumerate(pieces):
                add_row(row_of(entry, formatted.prefix if i == 0 else 0, i == 0))
                add_text(piece)
        return rows, texts

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Show new entries (those the filter accepts); one write per timer tick."""
        rows, texts = self._rows_for(entries)
        if not rows:
            return
        self._rows.extend(rows)  # before the write: pruning trims both lists alike
        self.write_lines(texts, scroll_end=False)
        self.lines_written += len(texts)

    def _update_size(self, updates: int, lines: list[str]) -> None:  # type: ignore[override]
        """The widest new row, measured here: Log measures in a thread per write, and with a
        view per node that was a thread and three worker messages per view every tick."""
        widest = 0
        for line in lines:  # most log lines are printable ASCII: one cell per character
            if line.isascii() and line.isprintable():
                width = len(line)
            else:
                width = cell_len(self._process_line(line))
            widest = max(widest, width)
        if lines:
            self._update_maximum_width(updates, widest)

    def rebuild(self) -> None:
        """Show the store again through the current filter, wrapping and timestamps."""
        self._wrap_width = max(0, self.scrollable_content_region.width)
        self.clear()
        self._rows.clear()
        self.match_row = None
        self.lines_written = 0
        self.append(self.store.last(self.max_lines or len(self.store), self.log_filter))
        self._catch_up_after_refresh()
        self._changed()

    def restart(self) -> None:
        """Empty the view for a new run of the job."""
        self.clear()
        self._rows.clear()
        self.match_row = None
        self.target = None
        self.lines_written = 0
        self.following = True
        self._changed()

    def _prune_max_lines(self) -> None:
        if self.max_lines is not None:
            remove = len(self._lines) - self.max_lines
            if remove > 0:
                del self._rows[:remove]
                if self.match_row is not None:
                    self.match_row = self.match_row - remove if self.match_row >= remove else None
        super()._prune_max_lines()

    def set_filter(self, log_filter: LogFilter) -> None:
        self.user_filter = log_filter
        self.rebuild()

    def set_wrap(self, wrap: bool) -> None:
        self.wrap = wrap
        self.rebuild()

    def set_timestamps(self, timestamps: bool) -> None:
        self.timestamps = timestamps
        self.rebuild()

    def on_resize(self, event: events.Resize) -> None:
        if self.wrap and self.scrollable_content_region.width != self._wrap_width:
            self.rebuild()

    def visible_text(self) -> list[str]:
        """Every line the view holds as it shows them, wrapped rows joined again."""
        out: list[str] = []
        for row, text in zip(self._rows, self._lines, strict=False):
            if row[ROW_FIRST]:
                out.append(text)
            elif out:
                out[-1] += text
        return out

    # -- following --------------------------------------------------------------------------

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        following = self.following
        if new_value >= self.max_scroll_y:
            self.following = True
        elif new_value < old_value:
            self.following = False
        if following != self.following:
            self._changed()

    def watch_virtual_size(self, size: Size) -> None:
        if self.following and self.is_on_screen:  # a hidden view catches up when shown
            self.catch_up()
            self._catch_up_after_refresh()

    def catch_up(self) -> None:
        """Go to the end if following. The deck calls it before it shows a view, so that the
        first frame of a view that got lines while hidden shows the newest. Forced: a view
        never laid out has no scrollbar yet, and its first layout clamps it to the real end."""
        self._catch_up_pending = False
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)

    def _catch_up_after_refresh(self) -> None:
        """Again once laid out (the first scrollbar of a view comes with the layout), unless
        the operator has scrolled away by then (Widget.scroll_end would go regardless)."""
        if not self._catch_up_pending:
            self._catch_up_pending = True
            self.call_after_refresh(self.catch_up)

    def on_show(self, event: events.Show) -> None:
        """Shown by a click on its tab, which the deck does not see coming."""
        self.catch_up()

    def set_following(self, following: bool) -> None:
        self.following = following
        if following:
            self.catch_up()
            self._catch_up_after_refresh()
        self._changed()

    def _stop_following(self) -> None:
        """Before a scroll back: a write landing before the scroll must not pull the view to
        the end again."""
        if self.following:
            self.following = False
            self._changed()

    def action_scroll_up(self) -> None:
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self._stop_following()
        self.scroll_up(animate=False, immediate=True)

    def action_page_up(self) -> None:
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self._stop_following()
        self.scroll_page_up(animate=False)

    def action_scroll_home(self) -> None:
        if not self._allow_scroll:
            raise SkipAction()
        self._stop_following()
        self.scroll_home(animate=False, immediate=True, x_axis=self.scroll_y == 0)

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if not (event.ctrl or event.shift) and self.allow_vertical_scroll:
            self._stop_following()
        super()._on_mouse_scroll_up(event)

    # -- search and jumps -------------------------------------------------------------------

    def set_search(self, pattern: re.Pattern[str] | None) -> int:
        """Highlight `pattern` and go to its first match below the top of the view."""
        self.search_pattern = pattern
        self.match_row = None
        self.matches = 0
        self.refresh()
        if pattern is None:
            self._changed()
            return 0
        self.matches = self.match_count()
        self.find(+1, start=int(self.scroll_y) - 1)
        return self.matches

    def match_count(self) -> int:
        pattern = self.search_pattern
        return 0 if pattern is None else sum(1 for t in self._lines if pattern.search(t))

    def find(self, direction: int, start: int | None = None) -> bool:
        """Go to the next (+1) or previous (-1) row that matches the search, wrapping around."""
        pattern, total = self.search_pattern, len(self._lines)
        if pattern is None or not total:
            return False
        here = start if start is not None else self.match_row
        if here is None:
            here = int(self.scroll_y) - 1 if direction > 0 else int(self.scroll_y)
        for step in range(1, total + 1):
            row = (here + direction * step) % total
            if pattern.search(self._lines[row]):
                self.match_row = row
                self._show_row(row)
                return True
        return False

    def jump_to(self, node: str, seq: int) -> bool:
        """Go to a node's line by its number; False if this view does not hold it."""
        for y, row in enumerate(self._rows):
            if row[ROW_FIRST] and row[ROW_SEQ] == seq and row[ROW_NODE] == node:
                self.target = LogEntry(*row_fields(row))
                self._show_row(y)
                return True
        return False

    @property
    def target_row(self) -> int | None:
        """The first row of the line jumped to, if this view holds it."""
        rows = self._rows
        return next(
            (y for y, row in enumerate(rows) if row[ROW_FIRST] and self._is_target(row)), None
        )

    def _is_target(self, row: Row) -> bool:
        target = self.target
        return (
            target is not None
            and row[ROW_SEQ] == target.seq
            and row_fields(row) == entry_fields_of(target)
        )

    def _show_row(self, row: int) -> None:
        """Put `row` a third of the way down the view, now and, for a view that has just been
        shown (its size is not known yet), again once it is laid out."""
        self.following = False

        def scroll() -> None:
            top = max(0, row - self.scrollable_content_region.height // 3)
            self.scroll_to(y=top, animate=False, immediate=True)

        scroll()
        self.call_after_refresh(scroll)
        self.refresh()
        self._changed()

    # -- the g prefix -----------------------------------------------------------------------

    async def on_key(self, event: events.Key) -> None:
        """Count the key for the prefix, and run its binding here, where the app would run
        it once the key had bubbled up through the deck's six containers: each is a message
        queue that a flood of lines keeps busy, and the wait was most of a key's latency."""
        self._keys += 1
        if await self.app._check_bindings(event.key):
            event.stop()
            event.prevent_default()

    @property
    def prefix_armed(self) -> bool:
        return self._armed_at is not None and self._armed_at == self._keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "after_g":
            return self._armed_at is not None and self._armed_at == self._keys - 1
        return True

    def action_arm_g(self) -> None:
        self._armed_at = self._keys
        self._changed()

    def action_after_g(self, what: str) -> None:
        self._armed_at = None
        if what == "top":
            self.action_scroll_home()
        self._changed()

    def action_scroll_end(self) -> None:
        self.set_following(True)

    # -- rendering --------------------------------------------------------------------------

    def _render_line_strip(self, y: int, rich_style: Style) -> Strip:
        """Log's line rendering, plus prefix colours, search matches and the jump target."""
        if self.text_selection is not None or y >= len(self._rows):
            return super()._render_line_strip(y, rich_style)
        row = self._rows[y]
        line = self._process_line(self._lines[y])
        prefix, note = row[ROW_PREFIX], row[ROW_NOTE]
        target = self._is_target(row)
        if self.search_pattern is None and y != self.match_row and not target:
            # What Text would render, without it: the views redraw every row on every tick.
            if note:
                segments = [Segment(line, rich_style + NOTE_STYLE)]
            elif 0 < prefix < len(line):
                prefix_style = rich_style + rank_style(row[ROW_RANK])
                segments = [Segment(line[:prefix], prefix_style),
                            Segment(line[prefix:], rich_style)]  # fmt: skip
            elif prefix:
                segments = [Segment(line, rich_style + rank_style(row[ROW_RANK]))]
            else:
                segments = [Segment(line)]  # as Text renders a line without spans: unstyled
            return Strip(segments, cell_len(line))
        text = Text(line, no_wrap=True, style=rich_style)
        if note:
            text.stylize(NOTE_STYLE)
        elif prefix:
            text.stylize(rank_style(row[ROW_RANK]), 0, prefix)
        if self.search_pattern is not None:
            for match in self.search_pattern.finditer(line):
                text.stylize(MATCH_STYLE, match.start(), match.end())
        if y == self.match_row:
            text.stylize(CURRENT_ROW_STYLE)
        if target:
            text.stylize(TARGET_ROW_STYLE)
        return Strip(text.render(self.app.console), cell_len(line))

    def _changed(self) -> None:
        self.post_message(self.Changed(self))
