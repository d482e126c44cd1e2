"""Provides MetricPlot: a metric's curves against step in braille, with its axes and legend."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from ddptui.core.metrics.curves import Curve, CurveRole

# Braille dots by (column, row) inside a cell: 2 columns x 4 rows a character.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_BRAILLE = 0x2800
STYLE = {
    CurveRole.RANK: "bold cyan",
    CurveRole.TOTAL: "bold cyan",
    CurveRole.HIGH: "bold magenta",
    CurveRole.LOW: "bold cyan",
    CurveRole.PAST: "yellow",
}
Y_LABEL_WIDTH = 9


def axis_number(value: float) -> str:
    """A tick's value in at most Y_LABEL_WIDTH - 1 characters."""
    plain = value == 0 or 1e-3 <= abs(value) < 1e5
    return (f"{value:.4g}" if plain else f"{value:.2e}")[: Y_LABEL_WIDTH - 1]


class BrailleCanvas:
    """A grid of braille cells, each dot settable; a cell's style is the last curve's there."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = max(width, 1), max(height, 1)
        self.bits = [[0] * self.width for _ in range(self.height)]
        self.styles: list[list[str]] = [[""] * self.width for _ in range(self.height)]

    def dot(self, x: int, y: int, style: str) -> None:
        """The dot at (x, y), counted from the top left in dots (2 a cell across, 4 down)."""
        if 0 <= x < self.width * 2 and 0 <= y < self.height * 4:
            row, col = y // 4, x // 2
            self.bits[row][col] |= _DOTS[x % 2][y % 4]
            self.styles[row][col] = style

    def line(self, x0: int, y0: int, x1: int, y1: int, style: str) -> None:
        """The dots from one point to the next (Bresenham's)."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        error = dx + dy
        while True:
            self.dot(x0, y0, style)
            if x0 == x1 and y0 == y1:
                return
            twice = 2 * error
            if twice >= dy:
                error += dy
                x0 += sx
            if twice <= dx:
                error += dx
                y0 += sy

    def rows(self) -> list[Text]:
        out = []
        for bits, styles in zip(self.bits, self.styles, strict=True):
            text = Text()
            for bit, style in zip(bits, styles, strict=True):
                text.append(chr(_BRAILLE + bit) if bit else " ", style=style or None)
            out.append(text)
        return out


def draw_plot(curves: Sequence[Curve], width: int, height: int, title: str = "") -> Text:
    """The curves in `width` x `height` cells: a y axis with three values, the plot, the
    step axis under it, and one legend line."""
    text = Text(no_wrap=True, overflow="crop")
    points = [p for curve in curves for p in curve.points]
    plot_w, plot_h = width - Y_LABEL_WIDTH - 1, height - 2
    if not points or plot_w < 4 or plot_h < 2:
        text.append(title + ("\n" if title else ""))
        text.append("no values yet" if not points else "too small to plot", style="dim")
        return text
    steps = [s for s, _ in points]
    values = [v for _, v in points]
    x_lo, x_hi = min(steps), max(steps)
    y_lo, y_hi = min(values), max(values)
    if y_hi == y_lo:
        pad = abs(y_hi) * 0.05 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    canvas = BrailleCanvas(plot_w, plot_h)
    dots_w, dots_h = plot_w * 2 - 1, plot_h * 4 - 1

    def at(step: int, value: float) -> tuple[int, int]:
        x = 0 if x_hi == x_lo else round((step - x_lo) / (x_hi - x_lo) * dots_w)
        y = round((y_hi - value) / (y_hi - y_lo) * dots_h)
        return x, y

    for curve in curves:
        style = STYLE[curve.role]
        previous: tuple[int, int] | None = None
        for step, value in curve.points:
            here = at(step, value)
            if x_hi == x_lo:  # one step so far: its values as levels across the plot
                canvas.line(0, here[1], dots_w, here[1], style)
            elif previous is None:
                canvas.dot(*here, style)
            else:
                canvas.line(*previous, *here, style)
            previous = here
    labels = {0: axis_number(y_hi), plot_h - 1: axis_number(y_lo)}
    if plot_h >= 5:
        labels[(plot_h - 1) // 2] = axis_number((y_hi + y_lo) / 2)
    for index, row in enumerate(canvas.rows()):
        text.append(labels.get(index, "").rjust(Y_LABEL_WIDTH - 1) + " │", style="dim")
        text.append_text(row)
        text.append("\n")
    left, right = f"step {x_lo}", f"{x_hi}"
    gap = max(plot_w - len(left) - len(right), 1)
    text.append(" " * (Y_LABEL_WIDTH + 1) + left + " " * gap + right + "\n", style="dim")
    legend = Text(" " * (Y_LABEL_WIDTH + 1))
    for curve in curves:
        legend.append("━━ ", style=STYLE[curve.role])
        legend.append(curve.label + "  ")
    text.append_text(legend)
    return text


class MetricPlot(Widget):
    """Draws the curves it is given at the size it has; the screen decides which."""

    DEFAULT_CSS = """
    MetricPlot { height: 1fr; width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 (Textual's name)
        super().__init__(id=id)
        self.curves: list[Curve] = []

    def show(self, curves: Sequence[Curve]) -> None:
        self.curves = list(curves)
        self.refresh()

    def render(self) -> Text:
        return draw_plot(self.curves, self.size.width, self.size.height)
