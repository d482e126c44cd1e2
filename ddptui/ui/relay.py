"""Provides SessionRelay: the session's emit callback, buffering lines and posting the rest."""

from __future__ import annotations

import threading
from collections.abc import Callable

from textual.message import Message

from ddptui.core.events import Event, MetricSampled, NodeLines, RankChanged
from ddptui.core.metrics.curves import Curve, live_curves
from ddptui.core.metrics.sample import MetricSample
from ddptui.core.metrics.store import MetricStore, MetricView
from ddptui.core.session.line_window import LineWindow
from ddptui.core.session.wire import LineBlock
from ddptui.ui.messages import RankBatch, RankUpdates, message_for
from ddptui.ui.widgets.logs.log_entry import LogEntry

# The most lines held here for the screen (its ticks come 15 a second). The session's process
# already paces what it sends (10,000 lines a second under a flood, bursts of up to 8,000 at
# once: see core/session/child.py); this bounds what waits here when the screen falls behind,
# since formatting more only takes the keys' time. The rest is counted as skipped; the run
# directory has it.
DEFAULT_BUFFER_LINES = 8000
# The most of them the screen formats at once: a burst (the session's process sends up to 8,000
# lines at once after a quiet spell) is shown over half a second rather than stopping the keys
# for one tick of 40 ms or more. Sustained, the session's process sends some 700 a tick.
TICK_LINES = 1000
_new = tuple.__new__  # LogEntry(...) without its Python-level __new__: the hot path


class LineBuffer:
    """Every node's lines since the last flush, in arrival order (the merged view needs it).

    Beyond `limit` the oldest are dropped and counted per node (a `LineWindow`: its docstring
    lists every bound on the way to the screen). Batches are kept as the session sent them;
    only the lines a flush hands on become LogEntry objects.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._window = LineWindow()
        self._lock = threading.Lock()  # the session appends in its thread, the screen takes

    @property
    def held(self) -> int:
        """The lines waiting for the next take."""
        return self._window.count

    def append(self, batch: NodeLines) -> None:
        with self._lock:
            self._window.append(batch, self.limit)

    def skipped(self, counts: dict[str, int]) -> None:
        """Lines left out before they came here (by the session's process), per node."""
        with self._lock:
            self._window.skipped(counts)

    def take(self, catch_up: bool = False) -> tuple[list[LogEntry], dict[str, int]]:
        """The oldest TICK_LINES lines held (the rest stay for the next take); `catch_up`:
        the newest TICK_LINES, the older ones counted as skipped (nothing stays)."""
        with self._lock:
            if catch_up:
                batches, dropped = self._window.take(min(self.limit, TICK_LINES))
            else:
                batches, dropped = self._window.take(self.limit, TICK_LINES)
        entries: list[LogEntry] = []  # built outside the lock: the session goes on meanwhile
        for batch in batches:
            node, ts, seq = batch.node, batch.ts, batch.first_seq
            entries += [
                _new(LogEntry, (node, text, rank, ts, seq + i, False))
                for i, (text, rank, _) in enumerate(batch.lines)
            ]
        return entries, dropped


class LiveMetrics:
    """The run's metrics as the session's samples arrive (in the reader thread), read by the
    metrics view (on the screen's loop) a few times a second: a MetricStore behind a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.store = MetricStore()
        self.samples = 0

    def add(self, event: MetricSampled) -> None:
        sample = MetricSample(event.rank, event.step, event.values, event.ts)
        with self._lock:
            self.store.add(sample)
            self.samples += 1

    def reset(self) -> None:
        with self._lock:
            self.store = MetricStore()
            self.samples = 0

    def snapshot(self, name: str | None) -> tuple[list[MetricView], list[Curve]]:
        """Every metric's view, and the curves of `name` (none: no curves), as of now."""
        with self._lock:
            views = [self.store.view(n) for n in self.store.names()]
            curves = live_curves(self.store, name) if name else []
        return views, curves


class SessionRelay:
    """Called once per event, in the reader thread of the session's process
    (SessionProcess) or on the app's event loop.

    NodeLines events (a node's output, the high-volume kind) go into a bounded buffer that
    the screen drains on a timer; RankChanged events gather in one RankUpdates message until
    the screen handles it; every other event becomes one message posted to `post` (which
    must be safe to call from the session's thread).
    """

    def __init__(
        self, post: Callable[[Message], object], buffer_lines: int = DEFAULT_BUFFER_LINES
    ) -> None:
        self._post = post
        self._buffer = LineBuffer(buffer_lines)
        self.lines_seen = 0
        self._ranks = RankBatch()
        self._ranks.taken = True
        self.metrics = LiveMetrics()

    def emit(self, event: Event) -> None:
        if isinstance(event, NodeLines):
            self.lines_seen += len(event.lines)
            self._buffer.append(event)
            return
        if isinstance(event, RankChanged):
            with self._ranks.lock:
                if not self._ranks.taken:
                    self._ranks.append(event)
                    return
            self._ranks = RankBatch([event])
            self._post(RankUpdates(self._ranks))
            return
        if isinstance(event, MetricSampled):  # the metrics view reads them when it shows
            self.metrics.add(event)
            return
        message = message_for(event)
        if message is not None:
            self._post(message)

    def take_block(self, block: LineBlock) -> None:
        """A block of the nodes' lines from the session's process (in its reader thread):
        at most what the screen shows a tick; `block.seen` counts every line ingested."""
        self.lines_seen = block.seen
        if block.dropped:
            self._buffer.skipped(block.dropped)
        for batch in block.batches:
            self._buffer.append(batch)

    def drain(self, catch_up: bool = False) -> tuple[list[LogEntry], dict[str, int]]:
        """Lines since the last drain, at most TICK_LINES (the oldest; with `catch_up`, the
        newest and nothing left waiting), and per node how many were dropped before them."""
        return self._buffer.take(catch_up)
