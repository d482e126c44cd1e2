"""Provides the log views' model: entries, filters, formatting and wrapping (no Textual here)."""

from __future__ import annotations

import re
import shlex
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len

DEFAULT_STORE_LINES = 20_000


class FilterError(ValueError):
    """A filter the operator typed that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One logical line of a node's output: who wrote it, when the console saw it, its number."""

    node: str
    text: str
    rank: int | None = None
    ts: float = 0.0
    seq: int = 0  # NodeLine.seq: the line's number in its node's output
    note: bool = False  # the console's own remark ("… 12 lines skipped"), not node output


@dataclass(frozen=True)
class LogFilter:
    """Which entries a view shows: nodes, ranks (empty: all) and a regular expression."""

    nodes: frozenset[str] = frozenset()
    ranks: frozenset[int] = frozenset()
    pattern: re.Pattern[str] | None = None

    def accepts(self, entry: LogEntry) -> bool:
        if entry.note:
            return not self.nodes or entry.node in self.nodes
        if self.nodes and entry.node not in self.nodes:
            return False
        if self.ranks and entry.rank not in self.ranks:
            return False
        return self.pattern is None or self.pattern.search(entry.text) is not None

    @property
    def active(self) -> bool:
        return bool(self.nodes or self.ranks or self.pattern)

    def describe(self) -> str:
        parts = [f"node:{n}" for n in sorted(self.nodes)]
        parts += [f"rank:{r}" for r in sorted(self.ranks)]
        if self.pattern is not None:
            parts.append(self.pattern.pattern)
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str, known_nodes: Sequence[str] = ()) -> LogFilter:
        """`node:local1 rank:3 rank:5 CUDA|NCCL`: node and rank terms, the rest a regex.

        An empty text is no filter. A node that is not one of `known_nodes` is refused, so a
        typo does not silently show nothing.
        """
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise FilterError(f"filter {text!r}: {exc}") from None
        nodes: set[str] = set()
        ranks: set[int] = set()
        rest: list[str] = []
        for word in words:
            key, sep, value = word.partition(":")
            if sep and key in ("node", "n"):
                if known_nodes and value not in known_nodes:
                    raise FilterError(f"no node {value!r}: the nodes are {', '.join(known_nodes)}")
                nodes.add(value)
            elif sep and key in ("rank", "r"):
                ranks.update(_rank_set(value))
            else:
                rest.append(word)
        return cls(frozenset(nodes), frozenset(ranks), compile_pattern(" ".join(rest)))


def _rank_set(value: str) -> set[int]:
    """`3`, `0-3` or `1,5`: ranks to keep."""
    ranks: set[int] = set()
    for part in value.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise FilterError(f"rank:{value}: expected a rank, a range 0-3 or a list 1,5")
        ranks.update(range(int(low), int(high or low) + 1))
    return ranks


def compile_pattern(text: str) -> re.Pattern[str] | None:
    """A search or filter regex; smart case: all lower case means case-insensitive."""
    if not text:
        return None
    flags = re.IGNORECASE if text == text.lower() else 0
    try:
        return re.compile(text, flags)
    except re.error as exc:
        raise FilterError(f"{text!r} is not a regular expression: {exc}") from None


@dataclass(frozen=True)
class Formatted:
    """A line as a view shows it: the text, and how many of its first cells are the prefix."""

    text: str
    prefix: int


def format_entry(entry: LogEntry, *, merged: bool, timestamps: bool) -> Formatted:
    """`[r3] text` in a node's pane, `[local0/r3] text` in the merged view; an optional clock."""
    if entry.note:
        tag = ""
    elif merged:
        who = f"{entry.node}/r{entry.rank}" if entry.rank is not None else entry.node
        tag = f"[{who}] "
    else:
        tag = f"[r{entry.rank}] " if entry.rank is not None else ""
    clock = ""
    if timestamps and entry.ts:
        millis = int(entry.ts % 1 * 1000)
        clock = f"{time.strftime('%H:%M:%S', time.localtime(entry.ts))}.{millis:03d} "
    prefix = clock + tag
    return Formatted(prefix + entry.text, len(prefix))


def wrap_rows(text: str, width: int) -> list[str]:
    """Cut a line into rows of at most `width` cells (wide characters count double)."""
    if width <= 0 or cell_len(text) <= width:
        return [text]
    rows: list[str] = []
    row: list[str] = []
    used = 0
    for char in text:
        w = cell_len(char)
        if used + w > width and row:
            rows.append("".join(row))
            row, used = [], 0
        row.append(char)
        used += w
    if row:
        rows.append("".join(row))
    return rows


@dataclass
class LogStore:
    """The console's window on every node's output: the newest `limit` entries, in order.

    The full logs are on disk in the run directory; this only bounds what the views can show.
    """

    limit: int = DEFAULT_STORE_LINES
    _entries: deque[LogEntry] = field(init=False)
    dropped: int = 0

    def __post_init__(self) -> None:
        self._entries = deque(maxlen=self.limit)

    def extend(self, entries: Iterable[LogEntry]) -> None:
        for entry in entries:
            if len(self._entries) == self.limit:
                self.dropped += 1
            self._entries.append(entry)

    def clear(self) -> None:
        self._entries.clear()
        self.dropped = 0

    def __iter__(self) -> Iterator[LogEntry]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def last(self, count: int, log_filter: LogFilter) -> list[LogEntry]:
        """The newest `count` entries the filter accepts, oldest first."""
        out: list[LogEntry] = []
        for entry in reversed(self._entries):
            if log_filter.accepts(entry):
                out.append(entry)
                if len(out) >= count:
                    break
        out.reverse()
        return out


def skipped_note(node: str, count: int) -> LogEntry:
    text = f"… {count} line(s) of {node} skipped here (the run directory has them all)"
    return LogEntry(node, text, note=True)
