"""Provides LineWindow: the nodes' newest lines up to a bound, the older ones counted per node.

The run directory keeps every line; what travels on to the screen is a window of them, bounded
at each hop so a flood never makes the console fall behind. The four bounds, in order:

1. The session's process sends the console at most `child.LINES_PER_S` lines a second,
   saved up to `child.BURST_LINES` at once (a 1,024-rank job printing its epoch line together
   comes whole): a `LineWindow` in its outbox.
2. The console's relay keeps at most `ui.relay.DEFAULT_BUFFER_LINES` between two ticks of the
   screen: a `LineWindow` too.
3. The console's log store keeps `DEFAULT_STORE_LINES` (ui/widgets/logs/log_store.py), and
4. each log view draws at most `DEFAULT_MAX_LINES` rows (ui/widgets/logs/log_view.py).

What a window leaves out is counted per node and shown as skipped, where the lines were (a
node's count is always of lines older than any it holds); nothing is lost on disk.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque

from ddptui.core.events import NodeLines


class LineWindow:
    """Batches of lines in arrival order, whole batches dropped oldest first beyond a bound.

    Not locked: its owner (the outbox's writer, the relay) holds its own lock around it.
    """

    def __init__(self) -> None:
        self._batches: deque[NodeLines] = deque()
        self.count = 0  # the lines held
        self.dropped: Counter[str] = Counter()  # left out since the last take, per node

    def append(self, batch: NodeLines, keep: int) -> None:
        """Add a batch, then leave out the oldest whole batches beyond `keep` lines."""
        self._batches.append(batch)
        self.count += len(batch.lines)
        self.trim(keep)

    def trim(self, keep: int) -> None:
        """Leave out the oldest whole batches while the rest still hold `keep` lines."""
        while self._batches and self.count - len(self._batches[0].lines) >= keep:
            oldest = self._batches.popleft()
            self.count -= len(oldest.lines)
            self.dropped[oldest.node] += len(oldest.lines)

    def skipped(self, counts: dict[str, int]) -> None:
        """Lines an earlier hop left out, counted with this window's own. They came after
        every line held of their node, so those are left out with them: a node's count always
        stands for lines older than any it still holds (the screen shows the count first)."""
        gone = {node for node, count in counts.items() if count}
        if gone:
            kept: deque[NodeLines] = deque()
            for held in self._batches:
                if held.node in gone:
                    self.count -= len(held.lines)
                    self.dropped[held.node] += len(held.lines)
                else:
                    kept.append(held)
            self._batches = kept
        self.dropped.update(counts)

    def take(self, keep: int, most: int | None = None) -> tuple[list[NodeLines], dict[str, int]]:
        """The newest `keep` lines (the oldest batch cut where it must be) and every line left
        out since the last take, per node; the window is empty afterwards. With `most`, only
        the oldest `most` of those lines are taken and the rest stay for the next take."""
        self.trim(max(keep, 1))
        skip = max(0, self.count - keep)  # only ever inside the oldest batch now
        dropped = dict(self.dropped)
        self.dropped.clear()
        if skip:
            first = self._batches[0]
            dropped[first.node] = dropped.get(first.node, 0) + skip
            self.count -= skip
            if skip < len(first.lines):
                self._batches[0] = _after(first, skip)
            else:
                self._batches.popleft()
        if most is None or most >= self.count:
            batches, self._batches = list(self._batches), deque()
            self.count = 0
            return batches, dropped
        batches = []
        room = most
        while room > 0:
            first = self._batches[0]
            if len(first.lines) <= room:
                batches.append(self._batches.popleft())
                room -= len(first.lines)
            else:
                batches.append(dataclasses.replace(first, lines=first.lines[:room]))
                self._batches[0] = _after(first, room)
                room = 0
        self.count -= most
        return batches, dropped


def _after(batch: NodeLines, cut: int) -> NodeLines:
    """The batch's lines from the `cut`-th on."""
    return dataclasses.replace(batch, lines=batch.lines[cut:], first_seq=batch.first_seq + cut)
