"""Provides LineFolder: the merged view's folding of a line many ranks print alike.

`[r0-6,8-15] Epoch 3 | Batchsize: 32 | Steps: 8` stands for sixteen ranks' identical lines;
a line that differs in any character (`Steps: 9` on rank 7) is not the same line and stays
apart, so the odd one out is what stands out. Only identical texts fold, never lines that
differ in numbers alone: those differences are often the news. The unfolded lines stay in
the node panes and on disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ddptui.core.metrics.shapes import rank_set as rank_set  # one way to write rank sets
from ddptui.ui.widgets.logs.log_entry import LogEntry

FOLD_WINDOW = 4096  # a line folds into one printed at most this many rows earlier
_SPAN = 1 << 32  # more than any rank


@dataclass(slots=True)
class FoldGroup:
    """The ranks that printed one text, and the row (counted from the view's start) it is on."""

    row: int
    ranks: set[int] = field(default_factory=set)


class LineFolder:
    """Which earlier row a rank's line joins, if any; the view owns the rows themselves.

    A text seen once is remembered as one int (its row and rank), and a group made only when
    a second rank prints it: no object per line for the garbage collector to walk. Texts are
    kept in two generations of `window` each, so forgetting is dropping a dictionary.
    """

    def __init__(self, window: int = FOLD_WINDOW) -> None:
        self.window = window
        self._recent: dict[str, int] = {}  # text -> row * _SPAN + rank, of its first line
        self._older: dict[str, int] = {}
        self._groups: dict[int, FoldGroup] = {}  # row -> the group folded into it
        self._older_groups: dict[int, FoldGroup] = {}

    def clear(self) -> None:
        self._recent.clear()
        self._older.clear()
        self._groups.clear()
        self._older_groups.clear()

    def join(self, text: str, rank: int, row: int) -> FoldGroup | None:
        """The group an identical line from another rank started within the window, with
        `rank` added; None if there is none (the caller puts the line on `row`, a new one)."""
        first = self._recent.get(text)
        if first is None:
            first = self._older.get(text)
        if first is not None:
            first_row, first_rank = divmod(first, _SPAN)
            if row - first_row <= self.window and rank != first_rank:
                group = self._groups.get(first_row) or self._older_groups.get(first_row)
                if group is None:
                    group = self._groups[first_row] = FoldGroup(first_row, {first_rank})
                if rank not in group.ranks:
                    group.ranks.add(rank)
                    return group
        if len(self._recent) >= self.window:
            self._older, self._recent = self._recent, {}
            self._older_groups, self._groups = self._groups, {}
        self._recent[text] = row * _SPAN + rank
        return None

    def fold(
        self, entries: Iterable[LogEntry], first_row: int
    ) -> tuple[list[LogEntry], dict[int, FoldGroup]]:
        """The entries that start a line of their own (the first on `first_row`, counted from
        the view's start, one row each), and the groups the others joined, by their row.
        Before the rows are made: a line that joins a group costs no formatting at all. The
        hot path of a flood: a line no other rank printed is two lookups and one store."""
        kept: list[LogEntry] = []
        joined: dict[int, FoldGroup] = {}
        at = first_row
        keep, join = kept.append, self.join
        recent, older = self._recent, self._older
        room = self.window - len(recent)
        for entry in entries:
            rank = entry.rank
            if rank is not None and not entry.note:
                text = entry.text
                if text in recent or text in older:
                    group = join(text, rank, at)
                    if group is not None:
                        joined[group.row] = group
                        continue
                    recent, older = self._recent, self._older
                    room = self.window - len(recent)
                elif room > 0:
                    recent[text] = at * _SPAN + rank
                    room -= 1
                else:
                    join(text, rank, at)  # starts a new generation
                    recent, older = self._recent, self._older
                    room = self.window - len(recent)
            keep(entry)
            at += 1
        return kept, joined
