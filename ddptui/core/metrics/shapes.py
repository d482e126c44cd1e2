"""Provides the folding of lines that differ only in their numbers: shapes, ranges, rank sets.

Sixteen ranks printing `[RANK 11] Epoch 3 | Batchsize: 32 | Steps: 31` at once are one line
of news: `[r0-15] [RANK 0..15] Epoch 3 | Batchsize: 32 | Steps: 31..34`. A line's shape is its
text with every number taken out (as Ray's log dedup ignores words with numeric parts); lines
of one shape fold, each number shown as the range it took. A line whose words differ stays
apart: the odd one out is what stands out.

The log view's folder (`ShapeFolder`) keys a line by its text without its digits, made for a
whole batch in one pass, and reads the numbers only of the rows it draws: folding a flood
costs a small part of taking it in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

FOLD_WINDOW = 4096  # a line folds into one printed at most this many rows earlier
_NUMBER = re.compile(r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
HOLE = "\x00"  # where a number was, in a shape key


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


def _no_hole(text: str) -> str:
    """The text with any HOLE of its own shown as U+FFFD, so that keys are unambiguous."""
    return text.replace(HOLE, "\ufffd") if HOLE in text else text


def shape_of(text: str) -> tuple[str, list[str]]:
    """A line's shape key (its text, each number a HOLE) and its numbers as printed."""
    parts = _NUMBER.split(_no_hole(text))
    return HOLE.join(parts[0::2]), parts[1::2]


def shape_key(text: str) -> str:
    """A line's shape key alone: lines with equal keys differ only in their numbers."""
    return _NUMBER.sub(HOLE, _no_hole(text))


@dataclass(slots=True)
class NumberRange:
    """The values one number of a shape took, with the lowest and highest as printed."""

    low: float
    high: float
    low_text: str
    high_text: str

    def widen(self, text: str) -> None:
        value = float(text)
        if value < self.low:
            self.low, self.low_text = value, text
        if value > self.high:
            self.high, self.high_text = value, text

    def render(self) -> str:
        return self.low_text if self.low == self.high else f"{self.low_text}..{self.high_text}"


class ShapeGroup:
    """Lines of one shape: who printed them, and each number's range.

    A line joins as its text; the numbers are read only when the group's text is asked for
    (`text`, `render`), each line once: a view asks only for the rows it draws, so the lines
    of a flood that scroll by unseen cost a dictionary lookup each, not a parse."""

    __slots__ = (
        "key", "first", "first_rank", "ranks", "row", "lines", "literals", "numbers", "_unread"
    )  # fmt: skip

    def __init__(self, key: str, first: str, rank: int, row: int = 0) -> None:
        self.key = key
        self.first = first
        self.first_rank = rank
        self.ranks = {rank}
        self.row = row  # where the folding view put it, counted from the view's start
        self.lines = 1
        self.literals: list[str] = []
        self.numbers: list[NumberRange] = []
        self._unread: list[str] = []

    @classmethod
    def start(cls, text: str, rank: int, row: int = 0, key: str | None = None) -> ShapeGroup:
        """A group of one line (`key`: its fold key; `shape_key(text)` if not given)."""
        return cls(shape_key(text) if key is None else key, text, rank, row)

    def add(self, text: str, rank: int) -> None:
        """Another rank's line of the same shape."""
        self._unread.append(text)
        self.ranks.add(rank)
        self.lines += 1

    def _read(self) -> None:
        """Widen the ranges by the lines not read yet. A line whose numbers sit otherwise
        than the first's (`5.` beside `5.5`: the same text but for its digits) counts among
        the group's ranks and lines, not in its ranges."""
        if not self.literals:
            parts = _NUMBER.split(_no_hole(self.first))
            self.literals = parts[0::2]
            self.numbers = [NumberRange(float(n), float(n), n, n) for n in parts[1::2]]
        for text in self._unread:
            parts = _NUMBER.split(_no_hole(text))
            if parts[0::2] == self.literals:
                for span, number in zip(self.numbers, parts[1::2], strict=True):
                    span.widen(number)
        self._unread.clear()

    def text(self) -> str:
        """The folded text: each number its range (`31..34`), or its value where all agree."""
        self._read()
        out = [self.literals[0]]
        for span, literal in zip(self.numbers, self.literals[1:], strict=True):
            out.append(span.render())
            out.append(literal)
        return "".join(out)

    def render(self) -> str:
        """`[r0-15] Epoch 3 | Batchsize: 32 | Steps: 31..34`."""
        return f"[{rank_set(self.ranks)}] {self.text()}"


_DIGITS = str.maketrans("", "", "0123456789")


def fold_key(text: str) -> str:
    """A line's fold key: its text without its digits (`fold_keys` for a batch)."""
    return text.translate(_DIGITS)


def fold_keys(texts: list[str]) -> list[str]:
    """The folder's keys of `texts`, each its text without its digits: lines that differ
    only in their digits share one. One pass of C over the batch, not a pattern per line
    (a line whose numbers sit otherwise, `5.` beside `5.5`, shares a key but not the ranges:
    see `ShapeGroup._read`)."""
    if not texts:
        return []
    keys = "\n".join(texts).translate(_DIGITS).split("\n")
    if len(keys) == len(texts):
        return keys
    return [fold_key(text) for text in texts]  # a text held a newline of its own


def fold_shapes(lines: Iterable[tuple[int, str]]) -> list[ShapeGroup]:
    """(rank, text) lines folded by shape, the groups in the order their first line came."""
    groups: dict[str, ShapeGroup] = {}
    for rank, text in lines:
        key = shape_key(text)
        group = groups.get(key)
        if group is None:
            groups[key] = ShapeGroup.start(text, rank, key=key)
        else:
            group.add(text, rank)
    return list(groups.values())


Open = ShapeGroup | tuple[int, int, str]  # a row of a shape: a group, or (row, rank, text)


class ShapeFolder:
    """Which earlier row a rank's line joins, by shape, as the log view's folding asks.

    A rank printing a shape again starts a new row (its next step is news), and a line folds
    only into a row at most `window` rows back. Each shape keeps its newest `OPEN` rows, and a
    line joins the oldest of them its rank is not in yet: a rank that runs an epoch behind the
    others joins its epoch's row, not theirs. Shapes are kept in two generations of `window`
    each, so forgetting is dropping a dictionary.
    """

    OPEN = 4

    def __init__(self, window: int = FOLD_WINDOW) -> None:
        self.window = window
        self._recent: dict[str, list[Open]] = {}
        self._older: dict[str, list[Open]] = {}

    def clear(self) -> None:
        self._recent.clear()
        self._older.clear()

    def join(self, text: str, rank: int, row: int) -> ShapeGroup | None:
        """The group a line of the same shape from another rank started within the window,
        with this line added; None if there is none (the caller puts it on `row`, new)."""
        _kept, joined = self.fold([text], [rank], row)
        return next(iter(joined.values()), None)

    def fold(
        self, texts: Sequence[str], ranks: Sequence[int | None], first_row: int
    ) -> tuple[list[int], dict[int, ShapeGroup]]:
        """A batch of lines (a rank of None: a line that never folds): the indices of those
        that start a row of their own (the first on `first_row`, one row each), and the
        groups the others joined, by their row. The keys are made in one pass; a row no
        other rank has joined is kept as (row, rank, text) and made a group when one does
        (most of a flood's lines are never joined)."""
        if None in ranks:
            keys = fold_keys([t for t, r in zip(texts, ranks, strict=True) if r is not None])
        else:
            keys = fold_keys(list(texts))
        kept: list[int] = []
        joined: dict[int, ShapeGroup] = {}
        at, window, k, most = first_row, self.window, 0, self.OPEN
        recent, older = self._recent, self._older
        for i, rank in enumerate(ranks):
            if rank is None:
                kept.append(i)
                at += 1
                continue
            key = keys[k]
            k += 1
            rows = recent.get(key)
            if rows is None:
                if len(recent) >= window:
                    self._older, self._recent = older, recent = recent, {}
                rows = recent[key] = older.pop(key, [])
            # The rank that started a shape's newest row is in all its open rows (it started
            # one because it could join none): its next line starts a row at once.
            last = rows[-1] if rows else None
            if last is None or (last[1] if isinstance(last, tuple) else last.first_rank) != rank:
                group = _join(rows, key, texts[i], rank, at - window)
                if group is not None:
                    joined[group.row] = group
                    continue
            rows.append((at, rank, texts[i]))
            if len(rows) > most:
                del rows[0]
            kept.append(i)
            at += 1
        return kept, joined


def _join(rows: list[Open], key: str, text: str, rank: int, oldest: int) -> ShapeGroup | None:
    """The oldest of a shape's open rows (none before row `oldest`) without `rank`, with the
    line added (a row of one line made a group first); None if there is none."""
    for j, found in enumerate(rows):
        if isinstance(found, ShapeGroup):
            if found.row >= oldest and rank not in found.ranks:
                found.add(text, rank)
                return found
        else:
            row, first_rank, first_text = found
            if row >= oldest and rank != first_rank:
                group = rows[j] = ShapeGroup(key, first_text, first_rank, row)
                group.add(text, rank)
                return group
    return None
