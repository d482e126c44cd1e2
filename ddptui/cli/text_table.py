"""Provides text tables fitted to a terminal's width, as `ps` and `squeue` fit theirs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

GAP = "  "
ELLIPSIS = "…"


@dataclass(frozen=True)
class Column:
    """A column, and how it gives up room when the table is wider than the terminal.

    `short` is its title when room is short; `min_width`: its cells may be cut down to this
    many characters, ending in `…` (None: never cut, e.g. a run id one types again);
    `drop`: the order in which columns are left out once cutting is not enough (1 first;
    None: always shown).
    """

    title: str
    short: str = ""
    min_width: int | None = None
    drop: int | None = None


def terminal_width(out: TextIO, wide: bool = False) -> int | None:
    """The width to fit: the terminal's, or None (full width) when `out` is not a terminal
    (a pipe, a file) or `wide` is asked for. `$COLUMNS` wins, as it does for `ps`."""
    if wide:
        return None
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return None
    if os.environ.get("COLUMNS", "").isdigit():
        return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size().columns


def clip(text: str, width: int) -> str:
    """`text` in at most `width` characters; a cut one ends in `…`."""
    if len(text) <= width:
        return text
    return text[: width - 1] + ELLIPSIS if width > 0 else ""


def fit_table(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None = None
) -> list[str]:
    """The header and one line per row, in at most `width` characters (None: as wide as
    the cells). Room is found by short titles, then by cutting the cells of columns that
    may be cut (the widest first), then by leaving columns out in their `drop` order; a
    table still too wide has its lines cut, so that a row is never wrapped onto two."""
    cells = [[str(cell) for cell in row] for row in rows]
    if width is None or _total(_natural(columns, cells, short=False)) <= width:
        return _render(columns, cells, _natural(columns, cells, short=False), short=False)
    droppable = sorted((c for c in columns if c.drop is not None), key=lambda c: c.drop or 0)
    for dropped in range(len(droppable) + 1):
        gone = {id(c) for c in droppable[:dropped]}
        kept = [i for i, c in enumerate(columns) if id(c) not in gone]
        shown = [columns[i] for i in kept]
        rows_shown = [[row[i] for i in kept] for row in cells]
        widths = _natural(shown, rows_shown, short=True)
        mins = [_least(c, w) for c, w in zip(shown, widths, strict=True)]
        if _total(mins) <= width or dropped == len(droppable):
            widths = _shrink(widths, mins, width)
            lines = _render(shown, rows_shown, widths, short=True)
            return [clip(line, width) for line in lines]
    raise AssertionError("unreachable: the last stage always returns")


def _natural(columns: Sequence[Column], rows: Sequence[Sequence[str]], short: bool) -> list[int]:
    titles = [_title(c, short) for c in columns]
    return [max(len(t), *(len(r[i]) for r in rows)) for i, t in enumerate(titles)]


def _least(column: Column, width: int) -> int:
    return width if column.min_width is None else min(width, column.min_width)


def _title(column: Column, short: bool) -> str:
    return column.short if short and column.short else column.title


def _total(widths: Sequence[int]) -> int:
    return sum(widths) + len(GAP) * max(0, len(widths) - 1)


def _shrink(widths: list[int], mins: Sequence[int], width: int) -> list[int]:
    """Cut the widest column that may still be cut, one character at a time, until the
    table fits or none can be cut further."""
    widths = list(widths)
    while _total(widths) > width:
        cuttable = [i for i, w in enumerate(widths) if w > mins[i]]
        if not cuttable:
            break
        widest = max(cuttable, key=lambda i: widths[i] - mins[i])
        widths[widest] -= 1
    return widths


def _render(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], widths: Sequence[int], short: bool
) -> list[str]:
    header = [_title(c, short) for c in columns]
    return [
        GAP.join(clip(cell, w).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
