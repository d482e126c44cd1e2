"""Provides LogTabBar: one row naming the logs, drawn only as far as it shows.

Textual's Tabs is a widget per tab in one row: at 512 nodes a switch laid out 513 tab
widgets and queried them twice. This bar is one widget whatever the number of logs; it
draws the tabs in sight around the one showing and says how many more lie either side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual import events
from textual.content import Content
from textual.message import Message
from textual.widget import Widget


@dataclass(frozen=True)
class Span:
    """What the cells from `start` to `end` (exclusive) of the row stand for: a tab's
    index, or a step of the window (`shift`: -1 to the left, +1 to the right)."""

    start: int
    end: int
    index: int | None = None
    shift: int = 0


class LogTabBar(Widget):
    """The tabs of a deck of logs; the deck says which is active and hears of clicks."""

    COMPONENT_CLASSES = {"log-tabs--active", "log-tabs--failed", "log-tabs--more"}
    DEFAULT_CSS = """
    LogTabBar {
        height: 1; width: 1fr; color: $text-muted; background: $panel;
        & > .log-tabs--active { color: $text; background: $primary; text-style: bold; }
        & > .log-tabs--failed { color: $text-error; }
        & > .log-tabs--more { color: $text-accent; text-style: bold; }
    }
    """

    class Selected(Message):
        """The operator clicked the tab of log `index`."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, labels: Sequence[str], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._labels = list(labels)
        self._widths = [Content(label).cell_length + 2 for label in self._labels]
        self._total = sum(self._widths)
        self._failed: set[int] = set()
        self._active = 0
        self._first = 0
        self.spans: list[Span] = []

    @property
    def labels(self) -> list[str]:
        return list(self._labels)

    @property
    def active(self) -> int:
        return self._active

    @active.setter
    def active(self, index: int) -> None:
        self._active = index
        self._bring_into_view()
        self.refresh()

    @property
    def cut(self) -> bool:
        """Whether some tabs are out of sight (each is its label and a cell either side)."""
        return self._total > self.size.width

    def set_label(self, index: int, label: str, *, failed: bool = False) -> None:
        """A new label for one tab: one row redrawn, nothing laid out."""
        self._labels[index] = label
        width = Content(label).cell_length + 2
        self._total += width - self._widths[index]
        self._widths[index] = width
        (self._failed.add if failed else self._failed.discard)(index)
        self.refresh()

    # -- the window -------------------------------------------------------------------------

    def _room(self, first: int) -> int:
        """Cells for tabs from `first` on: the row less its markers when the tabs are cut."""
        if not self.cut:
            return self.size.width
        left = len(f"‹{first} ") if first else 0
        return self.size.width - left - len(f" {len(self._labels)}›")

    def _last(self, first: int) -> int:
        """The index after the last tab that fits from `first` (at least one tab shows)."""
        room, end = self._room(first), first
        while end < len(self._widths) and (room >= self._widths[end] or end == first):
            room -= self._widths[end]
            end += 1
        return end

    def _bring_into_view(self) -> None:
        if not self.cut:
            self._first = 0
            return
        self._first = min(self._first, self._active)
        while self._last(self._first) <= self._active:
            self._first += 1

    def on_resize(self) -> None:
        self._bring_into_view()

    # -- drawing and clicks -----------------------------------------------------------------

    def render(self) -> Content:
        first = self._first if self.cut else 0
        last = self._last(first)
        style = self.get_visual_style
        parts: list[Content] = []
        spans: list[Span] = []
        x = 0

        def put(text: str, *classes: str, index: int | None = None, shift: int = 0) -> None:
            nonlocal x
            piece = Content(text).stylize(style(*classes)) if classes else Content(text)
            parts.append(piece)
            if index is not None or shift:
                spans.append(Span(x, x + piece.cell_length, index, shift))
            x += piece.cell_length

        if first:
            put(f"‹{first}", "log-tabs--more", shift=-1)
            put(" ")
        for index in range(first, last):
            classes = ["log-tabs--active"] if index == self._active else []
            if index in self._failed:
                classes.append("log-tabs--failed")
            put(f" {self._labels[index]} ", *classes, index=index)
        if last < len(self._labels):
            more = f"{len(self._labels) - last}›"
            put(" " * max(self.size.width - x - len(more), 1))
            put(more, "log-tabs--more", shift=1)
        self.spans = spans
        return Content("").join(parts)

    def span_at(self, x: int) -> Span | None:
        return next((span for span in self.spans if span.start <= x < span.end), None)

    def span_of(self, index: int) -> Span | None:
        """Where tab `index` is drawn, if it is in sight."""
        return next((span for span in self.spans if span.index == index), None)

    def on_click(self, event: events.Click) -> None:
        span = self.span_at(event.x)
        if span is None:
            return
        event.stop()
        if span.index is not None:
            self.post_message(self.Selected(span.index))
            return
        self._page(span.shift)

    def _page(self, shift: int) -> None:
        """Move the window a page right (+1) or left (-1), the active tab as it is."""
        if shift > 0:
            self._first = min(self._last(self._first), len(self._labels) - 1)
        else:
            first = self._first  # the furthest left a window can start and still reach here
            while first > 0 and self._last(first - 1) >= self._first:
                first -= 1
            self._first = first
        self.refresh()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self._page(1)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self._page(-1)
