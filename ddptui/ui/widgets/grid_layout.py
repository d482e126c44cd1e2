"""Provides the rank grid's layout: which text goes on which line at a given width (no Textual).

Three forms. Wide enough for a labelled cell per rank and at most `CELL_NODES` nodes: a line
per node with its name, state, restarts and one cell per rank (`r3 ▶`), a blank line between
nodes. Narrower, with as few nodes: the name and a short cell per rank (`r3▶`). Otherwise
compact: a line per node with one glyph per rank, wrapped onto more lines when
the ranks do not fit, and runs of `FOLD_MIN` or more nodes whose ranks all look the same folded
into one line (`node[001-096]  all running · 768`), so that the outliers are what shows.
Nothing is cut without a sign: a long name ends in `…`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import hostlist

from ddptui.ui.widgets.grid_cells import NodeRow, RankGridCell

NAME_WIDTH, STATE_WIDTH, RESTARTS_WIDTH = 14, 10, 4
CELL_WIDTH, CELL_GAP = 12, 1
CELLS_START = NAME_WIDTH + STATE_WIDTH + RESTARTS_WIDTH
CELL_NODES = 16
FOLD_MIN = 3
MAX_COMPACT_NAME = 20
# the order states are counted in, the grid's header
COUNT_ORDER = (
    "running", "straggler", "hung", "restarting", "failed", "stopped", "assigned", "pending",
    "done",
)  # fmt: skip
COUNT_NAME = {"straggler": "slow"}


@dataclass(frozen=True, slots=True)
class Span:
    """A piece of a line: its text, the look it is drawn in (a `rank-grid--*` name; None:
    the grid's own), and the cell it stands for, if any (where a click lands)."""

    text: str
    look: str | None = None
    cell: RankGridCell | None = None


Line = tuple[Span, ...]


def fits_cells(width: int, nodes: int, nproc: int) -> bool:
    return nodes <= CELL_NODES and CELLS_START + nproc * (CELL_WIDTH + CELL_GAP) <= width


def layout(rows: Sequence[NodeRow], width: int, nproc: int) -> list[Line]:
    """The grid's lines at `width` cells."""
    if width <= 0:
        return []
    if fits_cells(width, len(rows), nproc):
        return cell_lines(rows)
    name_width = compact_name_width(rows, width)
    label_width = max((len(c.label) for r in rows for c in r.cells), default=0) + 1
    if any(c.gpu is not None for r in rows for c in r.cells):
        label_width = max(label_width, 5)  # room for `97%▆` under each label
    if len(rows) <= CELL_NODES and name_width + 1 + nproc * (label_width + 1) <= width:
        return [line for row in rows for line in short_lines(row, name_width, label_width)]
    return compact_lines(rows, width)


def compact_name_width(rows: Sequence[NodeRow], width: int) -> int:
    longest = max((len(r.node) for r in rows), default=0)
    return min(longest, MAX_COMPACT_NAME, max(6, width // 2))


def short_lines(row: NodeRow, name_width: int, label_width: int) -> list[Line]:
    """A few nodes in a narrow grid: `local0 r0▶ r1▶`, the label and glyph of each rank."""
    spans = [Span(clip(row.node, name_width).ljust(name_width) + " ", "name")]
    if row.restarts:
        spans.append(Span(f"↻{row.restarts} ", "restarts"))
    for cell in row.cells:
        spans += [Span(f"{cell.label}{cell.glyph}".ljust(label_width), cell.look, cell), Span(" ")]
    if not any(cell.gpu is not None for cell in row.cells):
        return [tuple(spans)]
    under = [Span(" " * len(spans[0].text) + (" " * len(spans[1].text) if row.restarts else ""))]
    for cell in row.cells:
        under += [Span(cell.gpu_short[:label_width].ljust(label_width), cell.gpu_look), Span(" ")]
    return [tuple(spans), tuple(under)]


def cell_lines(rows: Sequence[NodeRow]) -> list[Line]:
    lines: list[Line] = []
    gap = Span(" " * CELL_GAP)
    for row in rows:
        spans = [
            Span(f"{row.node:<{NAME_WIDTH}.{NAME_WIDTH}}", "name"),
            Span(f"{row.state_text:<{STATE_WIDTH}.{STATE_WIDTH}}", node_look(row)),
            Span(
                f"{'↻' + str(row.restarts) if row.restarts else '':<{RESTARTS_WIDTH}}", "restarts"
            ),
        ]
        for cell in row.cells:
            spans += [Span(cell.render()[:CELL_WIDTH].center(CELL_WIDTH), cell.look, cell), gap]
        lines += [tuple(spans), gpu_line(row)]
    return lines


def gpu_line(row: NodeRow) -> Line:
    """Under a node's cells, each rank's GPU: ` 97% 41/80G` (the blank line between nodes
    when there is no telemetry)."""
    if not any(cell.gpu is not None for cell in row.cells):
        return ()
    spans = [Span(" " * CELLS_START)]
    for cell in row.cells:
        text = cell.gpu_text[:CELL_WIDTH].center(CELL_WIDTH)
        spans += [Span(text, cell.gpu_look if cell.gpu else None), Span(" " * CELL_GAP)]
    return tuple(spans)


def restarts_text(row: NodeRow) -> str:
    return f"↻{row.restarts}" if row.restarts else ""


def node_look(row: NodeRow) -> str:
    return f"node-{row.state.value}" if row.state is not None else "node"


def clip(text: str, width: int) -> str:
    """`text` in at most `width` cells; a cut one ends in `…`."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…" if width > 0 else ""


def compact_lines(rows: Sequence[NodeRow], width: int) -> list[Line]:
    """Glyphs, named once: each unfolded node's ranks as a range before its glyphs
    (`local1 r8-15 ▶▶▶▶▶▶▶▶`, the cell at position i is rank 8+i) and, above the first such
    node, a ruler of local ranks, when there is room for them."""
    name_width = compact_name_width(rows, width)
    runs = fold_runs(rows)
    shown = [row for run in runs if len(run) < FOLD_MIN for row in run]
    labels = {row.node: rank_span(row) for row in shown}
    label_width = max((len(text) for text in labels.values()), default=0)
    nproc = max((len(row.cells) for row in shown), default=0)
    if not label_width or name_width + 1 + label_width + 1 + nproc > width:
        label_width = 0
    lines: list[Line] = []
    ruled = False
    for run in runs:
        if len(run) >= FOLD_MIN:
            lines.append(folded_line(run, width))
            continue
        for row in run:
            row_lines = node_lines(row, name_width, width, labels[row.node], label_width)
            if not ruled and nproc > 1 and len(row_lines) == 1:
                lines.append(ruler(name_width, label_width, nproc))
            ruled = True
            lines += row_lines
    return lines


def rank_span(row: NodeRow) -> str:
    """The node's global ranks in a few characters: `r8-15` when they run in order (the
    cell at position i is rank 8+i), `r8…` when not, "" before the rendezvous."""
    ranks = [cell.rank for cell in row.cells]
    if not ranks or any(rank is None for rank in ranks):
        return ""
    first = ranks[0]
    assert first is not None
    if ranks != list(range(first, first + len(ranks))):
        return f"r{first}…"
    return f"r{first}" if len(ranks) == 1 else f"r{first}-{ranks[-1]}"


def ruler(name_width: int, label_width: int, nproc: int) -> Line:
    """The local ranks over the glyph columns (their last digit past 9)."""
    start = name_width + 1 + (label_width + 1 if label_width else 0)
    digits = "".join(str(i % 10) for i in range(nproc))
    return (Span(" " * start), Span(digits, "node"))


def fold_runs(rows: Sequence[NodeRow]) -> list[list[NodeRow]]:
    """Consecutive nodes grouped while every rank of each looks the same, nothing on them
    is chosen, and they were never restarted; any other node is a run of its own."""
    runs: list[list[NodeRow]] = []
    key_before: tuple[str, str] | None = None
    for row in rows:
        look = row.look
        foldable = look is not None and row.restarts == 0 and not any(c.selected for c in row.cells)
        key = (look, node_look(row)) if foldable and look is not None else None
        if key is not None and key == key_before:
            runs[-1].append(row)
        else:
            runs.append([row])
        key_before = key
    return runs


def folded_line(run: Sequence[NodeRow], width: int) -> Line:
    look = run[0].look or "pending"
    ranks = sum(len(row.cells) for row in run)
    names = hostlist.collect_hostlist([row.node for row in run])
    word = COUNT_NAME.get(look, look)
    glyph = run[0].cells[0].glyph if run[0].cells else ""
    text = f"{names} {glyph}×{ranks} {word}"
    return (Span(clip(text, width), look),)


def node_lines(
    row: NodeRow, name_width: int, width: int, label: str = "", label_width: int = 0
) -> list[Line]:
    """A node's name (and its ranks, given `label_width`), then its glyphs, wrapped under
    the first one when they do not fit."""
    name = clip(row.node, name_width).ljust(name_width) + " "
    head = Span(name + (label.ljust(label_width) + " " if label_width else ""), "name")
    restarts = Span(f"↻{row.restarts} ", "restarts") if row.restarts else None
    start = len(head.text) + (len(restarts.text) if restarts else 0)
    per_line = max(1, width - start)
    glyphs = [Span(cell.glyph, cell.look, cell) for cell in row.cells]
    lines: list[Line] = []
    for i in range(0, max(1, len(glyphs)), per_line):
        chunk = glyphs[i : i + per_line]
        if i == 0:
            lines.append((head, *([restarts] if restarts else []), *chunk))
        else:
            lines.append((Span(" " * start), *chunk))
    return lines


def cell_at(line: Line, x: int) -> RankGridCell | None:
    """The cell drawn at column `x` of a line, if any."""
    at = 0
    for span in line:
        end = at + len(span.text)
        if at <= x < end:
            return span.cell
        at = end
    return None


def cell_x(line: Line, cell: RankGridCell) -> int | None:
    """The middle column of a cell's span on a line."""
    at = 0
    for span in line:
        if span.cell is cell:
            return at + len(span.text) // 2
        at += len(span.text)
    return None


def count_looks(rows: Iterable[NodeRow]) -> Counter[str]:
    return Counter(cell.look for row in rows for cell in row.cells)


def describe_counts(counts: Counter[str]) -> str:
    """`running 1016 · hung 1 · failed 7`, in a fixed order."""
    return " · ".join(count_words(counts))


def count_words(counts: Counter[str]) -> list[str]:
    return [f"{COUNT_NAME.get(k, k)} {counts[k]}" for k in COUNT_ORDER if counts[k]]


def count_lines(counts: Counter[str], width: int) -> list[Line]:
    """The grid's header: how many ranks are in each state, wrapped at `·`, each count in its
    state's look."""
    lines: list[Line] = []
    spans: list[Span] = []
    used = 0
    for key in COUNT_ORDER:
        if not counts[key]:
            continue
        word = f"{COUNT_NAME.get(key, key)} {counts[key]}"
        sep = " · " if spans else ""
        if spans and used + len(sep) + len(word) > width:
            lines.append(tuple(spans))
            spans, used, sep = [], 0, ""
        if sep:
            spans.append(Span(sep))
        spans.append(Span(clip(word, width), f"count-{key}"))
        used += len(sep) + len(word)
    if spans:
        lines.append(tuple(spans))
    return lines
