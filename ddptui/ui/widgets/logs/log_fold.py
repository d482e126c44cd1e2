"""Provides LineFolder: the merged view's folding of lines many ranks print alike.

Lines that differ only in their numbers fold (core/metrics/shapes.py decides: a line's shape
is its text with the numbers taken out, as Ray's log dedup ignores words with numeric parts):
sixteen ranks' `Epoch 3 | Batchsize: 32 | Steps: 31` .. `Steps: 34` are one row,
`[r0-15] Epoch 3 | Batchsize: 32 | Steps: 31..34`, each number shown as the range it took. A
line whose words differ stays apart, so the odd one out is what stands out. The unfolded
lines stay in the node panes and on disk.
"""

from __future__ import annotations

from collections.abc import Iterable

from ddptui.core.metrics.shapes import FOLD_WINDOW, ShapeFolder, ShapeGroup
from ddptui.core.metrics.shapes import rank_set as rank_set  # one way to write rank sets
from ddptui.ui.widgets.logs.log_entry import LogEntry

FoldGroup = ShapeGroup  # the ranks that printed one shape, its numbers' ranges, its row


class LineFolder:
    """Which earlier row a rank's line joins, if any; the view owns the rows themselves.

    A rank printing a shape again starts a new row (its next step is news), and a line folds
    only into a row at most `window` rows back.
    """

    def __init__(self, window: int = FOLD_WINDOW) -> None:
        self.window = window
        self._shapes = ShapeFolder(window)

    def clear(self) -> None:
        self._shapes.clear()

    def join(self, text: str, rank: int, row: int) -> FoldGroup | None:
        """The group a line of the same shape from another rank started within the window,
        with this one added; None if there is none (the caller puts it on `row`, new)."""
        return self._shapes.join(text, rank, row)

    def fold(
        self, entries: Iterable[LogEntry], first_row: int
    ) -> tuple[list[LogEntry], dict[int, FoldGroup]]:
        """The entries that start a line of their own (the first on `first_row`, counted from
        the view's start, one row each), and the groups the others joined, by their row.
        Before the rows are made: a line that joins a group costs no formatting at all."""
        entries = list(entries)
        ranks = [None if e.note else e.rank for e in entries]
        kept, joined = self._shapes.fold([e.text for e in entries], ranks, first_row)
        return [entries[i] for i in kept], joined
