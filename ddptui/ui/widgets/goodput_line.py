"""Provides GoodputLine: the run's goodput in one line, with a small bar of where the time went."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ddptui.core.story.goodput import Goodput, Part, bar_cells, lost_words

BAR_CELLS = 16
# A glyph and a colour per part: told apart without colour too (stepping solid, lost time not).
PART_GLYPHS = {
    Part.STEPPING: ("█", "green"),
    Part.LAUNCH: ("▒", "blue"),
    Part.RESTART: ("▒", "magenta"),
    Part.STALLED: ("▓", "red"),
    Part.STRAGGLER: ("▓", "yellow"),
    Part.PHASES: ("░", "cyan"),
    Part.TEARDOWN: ("░", "grey50"),
    Part.DETACHED: ("·", "grey50"),
}


def describe_goodput(goodput: Goodput, current: Part | None = None) -> Text:
    """`goodput 62% ▕████▒▒░▏ now stalled · launch 20% · restart 8%`: the stepping share, the
    bar by part, the part the time goes to now if it is not stepping (a live run's), and the
    time lost biggest first."""
    text = Text()
    text.append("goodput ", style="bold")
    text.append(f"{goodput.fraction:.0%}".rjust(4), style="bold")
    text.append(" ▕")
    cells = bar_cells(goodput.parts, BAR_CELLS)
    for part in cells:
        glyph, colour = PART_GLYPHS[part]
        text.append(glyph, style=colour)
    text.append(" " * (BAR_CELLS - len(cells)) + "▏")
    if current is not None and current != Part.STEPPING:
        text.append(f" now {current.words}", style="bold")
        text.append(" ·")
    lost = lost_words(goodput.parts)
    if lost:
        text.append(f" {lost}")
    return text


class GoodputLine(Static):
    """One line, hidden until the run's first split comes; the screen sets what it shows."""

    DEFAULT_CSS = """
    GoodputLine {
        height: 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        display: none;
        &.-shown { display: block; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.goodput: Goodput | None = None
        self.current: Part | None = None

    def show(self, goodput: Goodput | None, current: Part | None = None) -> None:
        """The split so far (`current`: the part the time goes to now), or None: no run yet."""
        self.goodput, self.current = goodput, current
        self.set_class(goodput is not None, "-shown")
        self.update(describe_goodput(goodput, current) if goodput is not None else "")
