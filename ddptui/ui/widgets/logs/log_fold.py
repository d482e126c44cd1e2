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

FOLD_WINDOW = 4096  # a line folds into one printed at most this many rows earlier


def rank_set(ranks: Iterable[int]) -> str:
    """`r0-6,8-15` for ranks 0..6 and 8..15 (sorted, each once)."""
    parts: list[str] = []
    ordered = sorted(set(ranks))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return "r" + ",".join(parts)


@dataclass(slots=True)
class FoldGroup:
    """The ranks that printed one text, and the row (counted from the view's start) it is on."""

    row: int
    ranks: set[int] = field(default_factory=set)


class LineFolder:
    """Which earlier row a rank's line joins, if any; the view owns the rows themselves."""

    def __init__(self, window: int = FOLD_WINDOW) -> None:
        self.window = window
        self._groups: dict[str, FoldGroup] = {}

    def clear(self) -> None:
        self._groups.clear()

    def join(self, text: str, rank: int, row: int) -> FoldGroup | None:
        """The group an identical line from another rank started within the window, with
        `rank` added; None if there is none (the caller puts the line on `row`, a new one)."""
        group = self._groups.get(text)
        if group is not None and row - group.row <= self.window and rank not in group.ranks:
            group.ranks.add(rank)
            return group
        self._groups[text] = FoldGroup(row, {rank})
        if len(self._groups) > 2 * self.window:
            self._forget_before(row - self.window)
        return None

    def _forget_before(self, row: int) -> None:
        self._groups = {t: g for t, g in self._groups.items() if g.row >= row}
