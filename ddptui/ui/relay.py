"""Provides SessionRelay: the session's emit callback, buffering lines and posting the rest."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from textual.message import Message

from ddptui.core.events import Event, NodeLine, RankChanged
from ddptui.ui.logmodel import LogEntry
from ddptui.ui.messages import RankBatch, RankUpdates, message_for

DEFAULT_BUFFER_LINES = 5000


def entry_for(event: NodeLine) -> LogEntry:
    return LogEntry(event.node, event.text, event.rank, event.ts, event.seq)


class LineBuffer:
    """Every node's lines since the last flush, in arrival order (the merged view needs it).

    Beyond `limit` the oldest are dropped and counted per node: the views show at most their
    own window anyway, and each node's full log is always in the run directory, so dropping
    here only bounds memory when the nodes outrun the screen.
    """

    def __init__(self, limit: int) -> None:
        self._entries: deque[LogEntry] = deque(maxlen=limit)
        self.dropped: Counter[str] = Counter()

    def append(self, entry: LogEntry) -> None:
        if len(self._entries) == self._entries.maxlen:
            self.dropped[self._entries[0].node] += 1
        self._entries.append(entry)

    def take(self) -> tuple[list[LogEntry], dict[str, int]]:
        entries, dropped = list(self._entries), dict(self.dropped)
        self._entries.clear()
        self.dropped.clear()
        return entries, dropped


class SessionRelay:
    """Called by the Session on the app's event loop, once per event.

    NodeLine events (one per output line, the high-volume kind) go into a bounded buffer that
    the screen drains on a timer; RankChanged events gather in one RankUpdates message until
    the screen handles it; every other event becomes one message posted to `post`.
    """

    def __init__(
        self, post: Callable[[Message], object], buffer_lines: int = DEFAULT_BUFFER_LINES
    ) -> None:
        self._post = post
        self._buffer = LineBuffer(buffer_lines)
        self.lines_seen = 0
        self._ranks = RankBatch()
        self._ranks.taken = True

    def emit(self, event: Event) -> None:
        if isinstance(event, NodeLine):
            self.lines_seen += 1
            self._buffer.append(entry_for(event))
            return
        if isinstance(event, RankChanged):
            if self._ranks.taken:
                self._ranks = RankBatch()
                self._post(RankUpdates(self._ranks))
            self._ranks.append(event)
            return
        message = message_for(event)
        if message is not None:
            self._post(message)

    def drain(self) -> tuple[list[LogEntry], dict[str, int]]:
        """Lines since the last drain, and per node how many were dropped before them."""
        return self._buffer.take()
