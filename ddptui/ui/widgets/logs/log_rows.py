"""Provides the log views' rows: entries formatted and wrapped, plain tuples per screen row, and
the styles they are drawn in."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.strip import Strip

from ddptui.core.monitor.chatter import is_torchft_routine as routine
from ddptui.ui.widgets.logs.log_entry import LogEntry
from ddptui.ui.widgets.logs.log_filter import LogFilter

_RANK_COLOURS = (
    "cyan", "magenta", "green", "yellow", "bright_blue", "bright_red",
    "bright_cyan", "bright_magenta", "bright_green", "dark_orange", "orchid", "spring_green2",
)  # fmt: skip
AGENT_STYLE = Style(color="grey62", italic=True)
NOTE_STYLE = Style(color="yellow", italic=True)
MATCH_STYLE = Style(color="black", bgcolor="yellow")
CURRENT_ROW_STYLE = Style(bgcolor="grey30")
TARGET_ROW_STYLE = Style(bgcolor="dark_red", bold=True)
# Characters str.splitlines() cuts at: a terminal would break the row there.
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


# A row of a view: the fields of its entry (node, text, rank, ts, seq, note), then how many
# of its first cells are the prefix (first row of an entry only) and whether it is the entry's
# first row. A plain tuple of strings, numbers and flags, which the garbage collector stops
# tracking: a row object per row, each holding its entry, made 17 views of 20,000 rows some
# 700,000 objects that every full collection walked, stopping the console 0.1-1 s at a time.
Fields = tuple[str, str, int | None, float, int, bool]
Row = tuple[str, str, int | None, float, int, bool, int, bool]
ROW_NODE: Final = 0
ROW_TEXT: Final = 1
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


_CONTROL = re.compile("[\u0000-\u0014]")


def printable(text: str) -> str:
    """A row's text as drawn: tabs expanded, control codes shown as `�` (as Textual's Log)."""
    return _CONTROL.sub("�", text.expandtabs())


def row_strip(
    row: Row,
    line: str,
    base: Style,
    console: Console,
    *,
    search: re.Pattern[str] | None = None,
    current: bool = False,
    target: bool = False,
) -> Strip:
    """A row drawn in full (the view crops it): prefix colours, search matches, the row the
    search is on and the line jumped to."""
    prefix, note, rank = row[ROW_PREFIX], row[ROW_NOTE], row[ROW_RANK]
    agent = rank is None and not note
    if search is None and not current and not target:
        # What Text would render, without it: the views redraw every row on every tick.
        if note:
            segments = [Segment(line, base + NOTE_STYLE)]
        elif agent:
            segments = [Segment(line, base + AGENT_STYLE)]
        elif 0 < prefix < len(line):
            segments = [Segment(line[:prefix], base + rank_style(row[ROW_RANK])),
                        Segment(line[prefix:], base)]  # fmt: skip
        elif prefix:
            segments = [Segment(line, base + rank_style(row[ROW_RANK]))]
        else:
            segments = [Segment(line)]  # as Text renders a line without spans: unstyled
        return Strip(segments, cell_len(line))
    text = Text(line, no_wrap=True, style=base)
    if note:
        text.stylize(NOTE_STYLE)
    elif agent:
        text.stylize(AGENT_STYLE)
    elif prefix:
        text.stylize(rank_style(row[ROW_RANK]), 0, prefix)
    if search is not None:
        for match in search.finditer(line):
            text.stylize(MATCH_STYLE, match.start(), match.end())
    if current:
        text.stylize(CURRENT_ROW_STYLE)
    if target:
        text.stylize(TARGET_ROW_STYLE)
    return Strip(text.render(console), cell_len(line))


def rows_for(
    entries: Iterable[LogEntry],
    log_filter: LogFilter,
    *,
    merged: bool,
    timestamps: bool,
    width: int,
    agent: bool = True,
) -> tuple[list[Row], list[str]]:
    """The rows and texts of the entries the filter takes, wrapped at `width` (0: not); the
    hot path of a flood, so a filter that only names nodes is a set lookup and an unwrapped
    line one row. Without `agent`, torchrun's own lines (no rank, not the console's note)
    and torchft's routine logs are left out."""
    entries = accepted(entries, log_filter, agent=agent)
    if not width and not timestamps:
        return _unwrapped_rows(entries, merged)
    rows: list[Row] = []
    texts: list[str] = []
    add_row, add_text = rows.append, texts.append
    for entry in entries:
        formatted = format_entry(entry, merged=merged, timestamps=timestamps)
        text = displayable(formatted.text)
        pieces = wrap_rows(text, width) if width else None
        if pieces is None or len(pieces) == 1:
            add_row(row_of(entry, formatted.prefix, True))
            add_text(text)
            continue
        for i, piece in enumerate(pieces):
            add_row(row_of(entry, formatted.prefix if i == 0 else 0, i == 0))
            add_text(piece)
    return rows, texts


def _unwrapped_rows(entries: Iterable[LogEntry], merged: bool) -> tuple[list[Row], list[str]]:
    """rows_for without wrapping or clocks: a row an entry, each distinct prefix made once,
    the texts checked for carriage returns and line breaks all at once (they are rare)."""
    rows: list[Row] = []
    texts: list[str] = []
    add_row, add_text = rows.append, texts.append
    tags: dict[tuple[str, int | None, bool], str] = {}
    for entry in entries:
        node, text, rank, ts, seq, note = entry
        key = (node, rank, note)
        tag = tags.get(key)
        if tag is None:
            tag = tags[key] = format_entry(entry._replace(text=""), merged=merged,
                                           timestamps=False).text  # fmt: skip
        add_row((node, text, rank, ts, seq, note, len(tag), True))
        add_text(tag + text)
    joined = "\n".join(texts)
    if "\r" in joined or _LINE_BREAKS.search(joined):
        texts = [displayable(text) for text in texts]
    return rows, texts


def accepted(
    entries: Iterable[LogEntry], log_filter: LogFilter, *, agent: bool = True
) -> Iterable[LogEntry]:
    """The entries a view shows: those the filter takes; torchrun's own lines and torchft's
    routine logs (about seven a step from every replica group) only with `agent`."""
    if not agent:
        entries = [
            entry
            for entry in entries
            if entry.note
            or (entry.rank is not None and ("torchft" not in entry.text or not routine(entry.text)))
        ]
    if log_filter.ranks or log_filter.pattern is not None:
        entries = [entry for entry in entries if log_filter.accepts(entry)]
    elif log_filter.nodes:
        nodes = log_filter.nodes
        entries = [entry for entry in entries if entry.node in nodes]
    return entries


def widest(texts: Iterable[str]) -> int:
    """The width in cells of the widest text; most log lines are printable ASCII, one cell per
    character, measured without Rich."""
    if not isinstance(texts, list):
        texts = list(texts)
    joined = "".join(texts)
    if joined.isascii() and joined.isprintable():  # the whole tick's at once: the usual case
        return max(map(len, texts), default=0)
    most = 0
    for text in texts:
        width = len(text) if text.isascii() and text.isprintable() else cell_len(printable(text))
        if width > most:
            most = width
    return most


def joined_rows(rows: Sequence[Row], texts: Sequence[str]) -> list[str]:
    """The lines behind the rows, wrapped rows joined again."""
    out: list[str] = []
    for row, text in zip(rows, texts, strict=True):
        if row[ROW_FIRST]:
            out.append(text)
        elif out:
            out[-1] += text
    return out


def selected_strip(
    line: str, base: Style, span: tuple[int, int] | None, look: Style, console: Console
) -> Strip:
    """A row while the operator selects text: plain, the selected part in `look`."""
    text = Text(line, no_wrap=True, style=base)
    if span is not None:
        start, end = span
        text.stylize(look, start, len(line) if end == -1 else end)
    return Strip(text.render(console), cell_len(line))


def next_match(
    texts: Sequence[str], pattern: re.Pattern[str], here: int, direction: int
) -> int | None:
    """The next (+1) or previous (-1) text after `here` that `pattern` finds, wrapping around."""
    total = len(texts)
    for step in range(1, total + 1):
        y = (here + direction * step) % total
        if pattern.search(texts[y]):
            return y
    return None


def first_row_of(rows: Sequence[Row], node: str, seq: int) -> int | None:
    """The first row of a node's line `seq`, if the rows hold it."""
    for y, row in enumerate(rows):
        if row[ROW_FIRST] and row[ROW_SEQ] == seq and row[ROW_NODE] == node:
            return y
    return None
