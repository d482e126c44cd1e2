"""Provides SessionRelay: the session's emit callback, buffering lines and posting the rest."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from textual.message import Message

from ddptui.core.events import Event, NodeLines, RankChanged
from ddptui.ui.messages import RankBatch, RankUpdates, message_for
from ddptui.ui.widgets.logs.log_store import LogEntry

DEFAULT_BUFFER_LINES = 5000


class LineBuffer:
    """Every node's lines since the last flush, in arrival order (the merged view needs it).

    Beyond `limit` the oldest are dropped and counted per node: the views show at most their
    own window anyway, and each node's full log is always in the run directory, so dropping
    here only bounds memory when the nodes outrun the screen. Batches are kept as the session
    sent them; only the lines a flush hands on become LogEntry objects.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._batches: deque[NodeLines] = deque()
        self._count = 0
        self.dropped: Counter[str] = Counter()

    def append(self, batch: NodeLines) -> None:
        self._batches.append(batch)
        self._count += len(batch.lines)
        while self._count - len(self._batches[0].lines) >= self.limit:
            oldest = self._batches.popleft()
            self._count -= len(oldest.lines)
            self.dropped[oldest.node] += len(oldest.lines)

    def take(self) -> tuple[list[LogEntry], dict[str, int]]:
        skip = max(0, self._count - self.limit)  # only ever inside the oldest batch
        entries: list[LogEntry] = []
        for batch in self._batches:
            node, ts, seq = batch.node, batch.ts, batch.first_seq
            lines = batch.lines
            if skip:
                self.dropped[node] += skip
                lines, seq, skip = lines[skip:], seq + skip, 0
            entries += [
                LogEntry(node, text, rank, ts, seq + i) for i, (text, rank, _) in enumerate(lines)
            ]
        dropped = dict(self.dropped)
        self._batches.clear()
        self._count = 0
        self.dropped.clear()
        return entries, dropped


class SessionRelay:
    """Called by the Session on the app's event loop, once per event.

    NodeLines events (a node's output, the high-volume kind) go into a bounded buffer that
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
        if isinstance(event, NodeLines):
            self.lines_seen += len(event.lines)
            self._buffer.append(event)
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
