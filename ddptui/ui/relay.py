"""Provides SessionRelay: the session's emit callback, buffering lines and posting the rest."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from textual.message import Message

from ddptui.core.events import Event, NodeLine
from ddptui.ui.messages import message_for

DEFAULT_BUFFER_LINES = 5000


def format_line(event: NodeLine) -> str:
    """A rank's line reads `[r3] text`; the agent's own lines are shown as they are."""
    return f"[r{event.rank}] {event.text}" if event.rank is not None else event.text


class LineBuffer:
    """One node's lines since the last flush; beyond `limit` the oldest are dropped and counted.

    The pane shows at most its own `max_lines` anyway, and the node's full log is always in the
    run directory, so dropping here only bounds memory when a node outruns the screen.
    """

    def __init__(self, limit: int) -> None:
        self._lines: deque[str] = deque(maxlen=limit)
        self.dropped = 0

    def append(self, line: str) -> None:
        if len(self._lines) == self._lines.maxlen:
            self.dropped += 1
        self._lines.append(line)

    def take(self) -> tuple[list[str], int]:
        lines, dropped = list(self._lines), self.dropped
        self._lines.clear()
        self.dropped = 0
        return lines, dropped


class SessionRelay:
    """Called by the Session on the app's event loop, once per event.

    NodeLine events (one per output line, the high-volume kind) go into a per-node buffer that
    the screen drains on a timer; every other event becomes one message posted to `post`.
    """

    def __init__(
        self, post: Callable[[Message], object], buffer_lines: int = DEFAULT_BUFFER_LINES
    ) -> None:
        self._post = post
        self._limit = buffer_lines
        self._buffers: dict[str, LineBuffer] = {}
        self.lines_seen = 0

    def emit(self, event: Event) -> None:
        if isinstance(event, NodeLine):
            self.lines_seen += 1
            buffer = self._buffers.get(event.node)
            if buffer is None:
                buffer = self._buffers[event.node] = LineBuffer(self._limit)
            buffer.append(format_line(event))
            return
        message = message_for(event)
        if message is not None:
            self._post(message)

    def drain(self, nodes: set[str] | None = None) -> dict[str, tuple[list[str], int]]:
        """Lines (and the count dropped) per node since the last drain.

        Nodes not in `nodes` keep their lines until a pane exists for them.
        """
        out: dict[str, tuple[list[str], int]] = {}
        for node, buffer in self._buffers.items():
            if nodes is not None and node not in nodes:
                continue
            lines, dropped = buffer.take()
            if lines or dropped:
                out[node] = (lines, dropped)
        return out
