"""Provides the folding of lines that differ only in their numbers: shapes, ranges, rank sets.

Sixteen ranks printing `[RANK 11] Epoch 3 | Batchsize: 32 | Steps: 31` at once are one line
of news: `[r0-15] [RANK 0..15] Epoch 3 | Batchsize: 32 | Steps: 31..34`. A line's shape is its
text with every number taken out (as Ray's log dedup ignores words with numeric parts); lines
of one shape fold, each number shown as the range it took. A line whose words differ stays
apart: the odd one out is what stands out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

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


@dataclass(slots=True)
class ShapeGroup:
    """Lines of one shape: who printed them, and each number's range."""

    key: str
    literals: list[str]
    numbers: list[NumberRange]
    ranks: set[int] = field(default_factory=set)
    row: int = 0  # where the folding view put it, counted from the view's start
    lines: int = 0

    @classmethod
    def start(cls, text: str, rank: int, row: int = 0) -> ShapeGroup:
        """A group of one line."""
        parts = _NUMBER.split(_no_hole(text))
        literals, numbers = parts[0::2], parts[1::2]
        ranges = [NumberRange(float(n), float(n), n, n) for n in numbers]
        return cls(HOLE.join(literals), literals, ranges, {rank}, row, 1)

    def add(self, numbers: list[str], rank: int) -> None:
        """Another rank's line of the same shape, given by its numbers (`shape_of`)."""
        for span, text in zip(self.numbers, numbers, strict=True):
            span.widen(text)
        self.ranks.add(rank)
        self.lines += 1

    def text(self) -> str:
        """The folded text: each number its range (`31..34`), or its value where all agree."""
        out = [self.literals[0]]
        for span, literal in zip(self.numbers, self.literals[1:], strict=True):
            out.append(span.render())
            out.append(literal)
        return "".join(out)

    def render(self) -> str:
        """`[r0-15] Epoch 3 | Batchsize: 32 | Steps: 31..34`."""
        return f"[{rank_set(self.ranks)}] {self.text()}"


def fold_shapes(lines: Iterable[tuple[int, str]]) -> list[ShapeGroup]:
    """(rank, text) lines folded by shape, the groups in the order their first line came."""
    groups: dict[str, ShapeGroup] = {}
    for rank, text in lines:
        key, numbers = shape_of(text)
        group = groups.get(key)
        if group is None:
            groups[key] = ShapeGroup.start(text, rank)
        else:
            group.add(numbers, rank)
    return list(groups.values())


class ShapeFolder:
    """Which earlier row a rank's line joins, by shape, as the log view's folding asks.

    As with identical lines, a rank printing a shape again starts a new row (its next step
    is news), and a line folds only into a row at most `window` rows back. Shapes are kept
    in two generations of `window` each, so forgetting is dropping a dictionary.
    """

    def __init__(self, window: int = FOLD_WINDOW) -> None:
        self.window = window
        self._recent: dict[str, ShapeGroup] = {}
        self._older: dict[str, ShapeGroup] = {}

    def clear(self) -> None:
        self._recent.clear()
        self._older.clear()

    def join(self, text: str, rank: int, row: int) -> ShapeGroup | None:
        """The group a line of the same shape from another rank started within the window,
        with this line added; None if there is none (the caller puts it on `row`, new)."""
        key, numbers = shape_of(text)
        group = self._recent.get(key) or self._older.get(key)
        if group is not None and row - group.row <= self.window and rank not in group.ranks:
            group.add(numbers, rank)
            return group
        if len(self._recent) >= self.window:
            self._older, self._recent = self._recent, {}
        self._recent[key] = ShapeGroup.start(text, rank, row)
        return None
