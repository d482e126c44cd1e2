"""Provides LogView: a lazily rendered, bounded log of one node (or all) with filter and search."""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.style import Style
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.selection import Selection
from textual.strip import Strip

from ddptui.ui.widgets.logs.following_view import FollowingView
from ddptui.ui.widgets.logs.log_entry import LogEntry
from ddptui.ui.widgets.logs.log_filter import LogFilter
from ddptui.ui.widgets.logs.log_fold import FoldGroup, LineFolder, rank_set
from ddptui.ui.widgets.logs.log_rows import (
    ROW_FIRST,
    ROW_PREFIX,
    ROW_SEQ,
    Row,
    accepted,
    displayable,
    entry_fields_of,
    first_row_of,
    joined_rows,
    next_match,
    printable,
    row_fields,
    row_strip,
    rows_for,
    selected_strip,
    widest,
)
from ddptui.ui.widgets.logs.log_store import LogStore

DEFAULT_MAX_LINES = 20_000


class LogView(FollowingView):
    """One log view: a node's output, or every node's merged with `node/rank` prefixes.

    A line-API view (Textual's `ScrollView.render_line`, as Toolong's `LogLines`): it holds
    one text and one plain `Row` per screen row, at most `max_lines` of them (the oldest go
    first), and draws only the rows in sight. The deck's LogStore holds the entries it
    rebuilds from when the filter, wrapping or timestamps change. Following, the scroll keys
    and the `g` prefix come from FollowingView.
    """

    ALLOW_SELECT = True
    DEFAULT_CSS = """
    LogView {
        background: $surface;
        color: $text;
        overflow: scroll;
        &:focus { background-tint: $foreground 5%; }
    }
    """

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
        super().__init__(id=id)
        self.max_lines = max_lines
        self.label = label
        self.node = node  # None: the merged view of every node
        self.store = store
        self.user_filter = LogFilter()
        self.wrap = False
        self.timestamps = False
        self.search_pattern: re.Pattern[str] | None = None
        self.match_row: int | None = None
        self.matches = 0
        self.target: LogEntry | None = None
        self.lines_written = 0
        self._rows: list[Row] = []
        self._lines: list[str] = []  # a text per row, as drawn but for control codes
        self._width = 0  # the widest row, in cells
        self._wrap_width = 0
        self.agent_lines = False  # torchrun's own lines: on disk, shown on request
        self.fold = False
        self._folder = LineFolder()
        self._stale: dict[int, FoldGroup] = {}  # folded rows not redrawn yet, by row
        self._dropped = 0  # rows pruned since the view was last emptied
        self._pass_style: Style | None = None  # while render_lines draws
        self._titles: tuple[str, str] | None = None  # the border's, as last set

    # -- what it shows ----------------------------------------------------------------------

    def set_titles(self, title: str, subtitle: str) -> None:
        """The border's title and subtitle, set only when they change: Textual redraws the
        whole view on every assignment, and the deck names them again on every tick that
        skipped lines (each tick, under a flood)."""
        if (title, subtitle) != self._titles:
            self._titles = (title, subtitle)
            self.border_title, self.border_subtitle = title, subtitle

    @property
    def merged(self) -> bool:
        return self.node is None

    @property
    def log_filter(self) -> LogFilter:
        base = frozenset({self.node}) if self.node is not None else frozenset()
        return LogFilter(base | self.user_filter.nodes, self.user_filter.ranks,
                         self.user_filter.pattern)  # fmt: skip

    @property
    def folding(self) -> bool:
        """Repeated lines fold: the merged view, with folding on, unwrapped (a row a line)."""
        return self.fold and self.merged and not self.wrap

    def append(self, entries: Sequence[LogEntry]) -> None:
        """Show new entries (those the filter accepts); one call per timer tick."""
        width = self._wrap_width if self.wrap else 0
        log_filter, agent = self.log_filter, self.agent_lines
        joined: dict[int, FoldGroup] = {}
        if self.folding:  # before the rows: a line that folds is never formatted
            shown = accepted(entries, log_filter, agent=agent)
            at = self._dropped + len(self._lines)
            entries, joined = self._folder.fold(shown, at)
            log_filter, agent = LogFilter(), True  # applied already
        rows, texts = rows_for(
            entries, log_filter, merged=self.merged, timestamps=self.timestamps, width=width,
            agent=agent,
        )  # fmt: skip
        if not rows and not joined:
            return
        self._rows.extend(rows)
        self._lines.extend(texts)
        self.lines_written += len(texts)
        self._stale.update(joined)  # each made into its row when drawn or read (_settle)
        self._prune()
        self._width = max(self._width, widest(texts))
        self.set_content_size(Size(self._width, len(self._lines)))
        if self.is_on_screen:  # a hidden view is drawn whole when it shows
            self.refresh()

    def _settle(self) -> None:
        """Make every folded row that changed since it was drawn into its text now."""
        stale, self._stale = self._stale, {}
        for group in stale.values():
            self._refold(group)

    def _refold(self, group: FoldGroup) -> None:
        """Give a group's row its rank set and its numbers' ranges: `[r0-15] Steps: 31..34`."""
        y = group.row - self._dropped
        if not 0 <= y < len(self._rows):
            return
        row, line = self._rows[y], self._lines[y]
        clock = line[: line.find("[")] if self.timestamps else ""
        prefix = f"{clock}[{rank_set(group.ranks)}] "
        self._rows[y] = (*row[:ROW_PREFIX], len(prefix), row[ROW_FIRST])
        self._lines[y] = prefix + displayable(group.text())
        self._width = max(self._width, len(self._lines[y]))

    def _sync_size(self) -> None:
        self.set_content_size(Size(self._width, len(self._lines)))

    def _prune(self) -> None:
        """Drop the oldest rows beyond `max_lines`; the search's row moves with them."""
        remove = len(self._lines) - self.max_lines
        if remove > 0:
            self._dropped += remove
            del self._rows[:remove]
            del self._lines[:remove]
            if len(self._stale) > self.max_lines:  # rows pruned before they were drawn
                self._stale = {r: g for r, g in self._stale.items() if r >= self._dropped}
            if self.match_row is not None:
                self.match_row = self.match_row - remove if self.match_row >= remove else None

    def clear(self) -> None:
        self._rows.clear()
        self._lines.clear()
        self._folder.clear()
        self._stale.clear()
        self._dropped = 0
        self._width = 0
        self.match_row = None
        self.lines_written = 0
        self.set_content_size(Size(0, 0))
        self.refresh()

    @property
    def lines(self) -> Sequence[str]:
        """The rows' texts, oldest first (read only)."""
        self._settle()
        return self._lines

    @property
    def line_count(self) -> int:
        return len(self._lines)

    def rebuild(self) -> None:
        """Show the store again through the current filter, wrapping and timestamps."""
        self._wrap_width = max(0, self.scrollable_content_region.width)
        self.clear()
        self.append(self.store.last(self.max_lines, self.log_filter))
        self._catch_up_after_refresh()
        self._changed()

    def restart(self) -> None:
        """Empty the view for a new run of the job."""
        self.clear()
        self.target = None
        self.following = True
        self._changed()

    def set_filter(self, log_filter: LogFilter) -> None:
        self.user_filter = log_filter
        self.rebuild()

    def set_wrap(self, wrap: bool) -> None:
        self.wrap = wrap
        self.rebuild()

    def set_agent_lines(self, shown: bool) -> None:
        self.agent_lines = shown
        self.rebuild()

    def set_fold(self, fold: bool) -> None:
        self.fold = fold
        self.rebuild()

    def set_timestamps(self, timestamps: bool) -> None:
        self.timestamps = timestamps
        self.rebuild()

    def on_resize(self, event: events.Resize) -> None:
        if self.wrap and self.scrollable_content_region.width != self._wrap_width:
            self.rebuild()

    def visible_text(self) -> list[str]:
        """Every line the view holds as it shows them, wrapped rows joined again."""
        self._settle()
        return joined_rows(self._rows, self._lines)

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
        self._settle()
        return 0 if pattern is None else sum(1 for t in self._lines if pattern.search(t))

    def find(self, direction: int, start: int | None = None) -> bool:
        """Go to the next (+1) or previous (-1) row that matches the search, wrapping around."""
        if self.search_pattern is None:
            return False
        here = start if start is not None else self.match_row
        if here is None:
            here = int(self.scroll_y) - 1 if direction > 0 else int(self.scroll_y)
        self._settle()
        row = next_match(self._lines, self.search_pattern, here, direction)
        if row is not None:
            self.match_row = row
            self._show_row(row)
        return row is not None

    def jump_to(self, node: str, seq: int) -> bool:
        """Go to a node's line by its number; False if this view does not hold it."""
        y = first_row_of(self._rows, node, seq)
        if y is not None:
            self.target = LogEntry(*row_fields(self._rows[y]))
            self._show_row(y)
        return y is not None

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

    # -- rendering --------------------------------------------------------------------------

    def render_lines(self, crop: Region) -> list[Strip]:
        """The rows in `crop`, with the view's style worked out once for all of them (Textual
        works it out from every ancestor's styles each time it is asked)."""
        self._pass_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._pass_style = None

    def render_line(self, y: int) -> Strip:
        """Screen row `y`: the view's row under it, cropped to the scroll position."""
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self._pass_style or self.rich_style
        if index >= len(self._lines):
            return Strip.blank(width, base)
        strip = self._row_strip(index, base)
        return strip.crop_extend(scroll_x, scroll_x + width, base).apply_offsets(scroll_x, index)

    def _row_strip(self, index: int, base: Style) -> Strip:
        if self._stale:
            group = self._stale.pop(index + self._dropped, None)
            if group is not None:
                width = self._width
                self._refold(group)
                if self._width > width:  # wider now: the scroll range follows, after this frame
                    self.call_after_refresh(self._sync_size)
        line = printable(self._lines[index])
        selection = self.text_selection
        if selection is not None:
            look = self.screen.get_component_rich_style("screen--selection")
            return selected_strip(line, base, selection.get_span(index), look, self.app.console)
        row = self._rows[index]
        return row_strip(
            row,
            line,
            base,
            self.app.console,
            search=self.search_pattern,
            current=index == self.match_row,
            target=self._is_target(row),
        )

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        self._settle()
        return selection.extract("\n".join(self._lines)), "\n"

    def _changed(self) -> None:
        self.post_message(self.Changed(self))
