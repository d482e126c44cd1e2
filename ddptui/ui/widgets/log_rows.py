"""Provides the log views' rows: plain tuples per screen row, and the styles they are drawn in."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from rich.style import Style

from ddptui.ui.logmodel import LogEntry

_RANK_COLOURS = (
    "cyan", "magenta", "green", "yellow", "bright_blue", "bright_red",
    "bright_cyan", "bright_magenta", "bright_green", "dark_orange", "orchid", "spring_green2",
)  # fmt: skip
AGENT_STYLE = Style(color="grey62", italic=True)
NOTE_STYLE = Style(color="yellow", italic=True)
MATCH_STYLE = Style(color="black", bgcolor="yellow")
CURRENT_ROW_STYLE = Style(bgcolor="grey30")
TARGET_ROW_STYLE = Style(bgcolor="dark_red", bold=True)
# Characters str.splitlines() cuts at: Log.write_lines would split a row there.
_LINE_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


@lru_cache(maxsize=1024)
def rank_style(rank: int | None) -> Style:
    """The colour of a rank's prefix, the same in every view."""
    if rank is None:
        return AGENT_STYLE
    return Style(color=_RANK_COLOURS[rank % len(_RANK_COLOURS)], bold=True)


def displayable(text: str) -> str:
    """What a terminal would leave of a line: after the last carriage return (progress bars)."""
    if "\r" in text:
        text = text.rstrip("\r").rsplit("\r", 1)[-1]
    return _LINE_BREAKS.sub(" ", text)


# A row of a view: the fields of its entry (node, text, rank, ts, seq, note), then how many
# of its first cells are the prefix (first row of an entry only) and whether it is the entry's
# first row. A plain tuple of strings, numbers and flags, which the garbage collector stops
# tracking: a row object per row, each holding its entry, made 17 views of 20,000 rows some
# 700,000 objects that every full collection walked, stopping the console 0.1-1 s at a time.
Fields = tuple[str, str, int | None, float, int, bool]
Row = tuple[str, str, int | None, float, int, bool, int, bool]
ROW_NODE: Final = 0
ROW_RANK: Final = 2
ROW_SEQ: Final = 4
ROW_NOTE: Final = 5
ROW_PREFIX: Final = 6
ROW_FIRST: Final = 7


def entry_fields_of(entry: LogEntry) -> Fields:
    return (entry.node, entry.text, entry.rank, entry.ts, entry.seq, entry.note)


def row_of(entry: LogEntry, prefix: int, first: bool) -> Row:
    return (entry.node, entry.text, entry.rank, entry.ts, entry.seq, entry.note, prefix, first)


def row_fields(row: Row) -> Fields:
    return row[:6]
