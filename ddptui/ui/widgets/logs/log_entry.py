"""Provides LogEntry: one logical line of a node's output as the console keeps it."""

from __future__ import annotations

from typing import NamedTuple


class LogEntry(NamedTuple):
    """One logical line of a node's output: who wrote it, when the console saw it, its number.

    A tuple, not a dataclass: one is made per line the screen takes (tens of thousands a
    second under a flood), and a tuple is made in a fraction of a frozen dataclass's time.
    """

    node: str
    text: str
    rank: int | None = None
    ts: float = 0.0
    seq: int = 0  # NodeLine.seq: the line's number in its node's output
    note: bool = False  # the console's own remark ("… 12 lines skipped"), not node output
