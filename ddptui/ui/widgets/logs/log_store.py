"""Provides LogStore: the console's bounded window on every node's output."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddptui.ui.widgets.logs.log_entry import LogEntry

if TYPE_CHECKING:
    from ddptui.ui.widgets.logs.log_filter import LogFilter

DEFAULT_STORE_LINES = 20_000


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

    def place(self, note: LogEntry) -> bool:
        """Put a note after its node's line `note.seq`, not after lines that came later
        (attaching, a rank change can reach the screen after the whole log it was read in).
        True if it went in before the newest entries (the views must show the store again);
        False if no later line is held: nothing is done, the caller adds it at the end."""
        entries = self._entries
        at = len(entries)
        for index in range(len(entries) - 1, -1, -1):
            entry = entries[index]
            if entry.node == note.node and not entry.note:
                if entry.seq <= note.seq:
                    break
                at = index
        if at == len(entries):
            return False
        if len(entries) == self.limit:
            entries.popleft()
            self.dropped += 1
            at -= 1
        entries.insert(max(at, 0), note)
        return True

    def __iter__(self) -> Iterator[LogEntry]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def last_text(self, node: str, rank: int | None) -> str | None:
        """The newest line a rank wrote that the console still holds."""
        if rank is None:
            return None
        for entry in reversed(self._entries):
            if entry.rank == rank and entry.node == node and not entry.note:
                return entry.text
        return None

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
