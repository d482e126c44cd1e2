"""Provides SpeedPanel: each rank's compute vs wait a step, alike ranks folded, the min/max line.

It draws what the straggler watch decided (core/diagnose/speed.py): its rows (`speed_rows`,
folded so 1,024 ranks read as a few lines), the named stragglers' evidence, and Megatron's
one line of extremes with the rank holding each.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from ddptui.core.diagnose.speed import SpeedRound, StragglerReport, speed_rows
from ddptui.ui.widgets.side_panel import SidePanel

BAR_CELLS = 12  # the row fits the side panel at 80 columns: label, bar, numbers


def speed_bar(compute_s: float, wait_s: float, longest: float, cells: int = BAR_CELLS) -> Text:
    """`██████████████░░░░  `: compute (solid) then wait (light), to scale of the longest step."""
    longest = longest or 1.0
    solid = round(compute_s / longest * cells)
    light = min(cells - solid, round(wait_s / longest * cells))
    bar = Text("█" * solid, style="bold")
    bar.append("░" * light, style="dim")
    bar.append(" " * (cells - solid - light))
    return bar


class SpeedPanel(SidePanel):
    """Hidden until the operator asks for it (`speed.view`); fed every scoring round."""

    panel_title = "Speed"

    DEFAULT_CSS = """
    SpeedPanel {
        height: auto;
        max-height: 20;
        padding: 0 1;
        margin-top: 1;
        border-top: solid $primary;
        display: none;
        &.-shown { display: block; }
        & > .speed-head { color: $text-muted; }
        & > .speed-line { color: $text; }
        & > .speed-evidence { color: $warning; }
        & > Static { width: 100%; }
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.head = Static(
            "no scores yet: the ranks' collectives come once a second", classes="speed-head"
        )
        self.rows = Static("", classes="speed-rows")
        self.line = Static("", classes="speed-line")
        self.evidence = Static("", classes="speed-evidence")
        self.last: SpeedRound | None = None
        self.report: StragglerReport | None = None
        self.keys = ("P", "+", "-")  # pause, threshold up, down: the keymap's, once known

    def compose(self) -> ComposeResult:
        yield self.head
        yield self.rows
        yield self.line
        yield self.evidence

    def show_round(self, round_: SpeedRound) -> None:
        self.last = round_
        pause, up, down = self.keys
        if round_.paused:
            self.head.update(f"detection paused ({pause} resumes)")
            return
        slow = ", ".join(f"r{r}" for r in round_.slow) or "none"
        self.head.update(
            f"threshold {round_.threshold:.2f} ({up}/{down}) · {round_.steps} steps · "
            f"slow: {slow} · {pause} pauses"
        )
        rows = speed_rows(round_, BAR_CELLS)
        longest = max((r.compute_s + r.wait_s for r in rows), default=1.0)
        width = max((len(r.label) for r in rows), default=2)
        text = Text()
        for row in rows:
            text.append(f"{row.label:<{width}} ", style="bold red" if row.slow else "")
            text.append_text(speed_bar(row.compute_s, row.wait_s, longest))
            text.append(f" {row.compute_s:.2f}+{row.wait_s:.2f}s {row.relative:.2f}\n")
        self.rows.update(text)
        self.line.update(round_.line)

    def show_report(self, report: StragglerReport) -> None:
        self.report = report
        self.evidence.update("\n".join(report.evidence))

    def toggle(self) -> bool:
        self.toggle_class("-shown")
        return self.has_class("-shown")

    def full_text(self) -> Text:
        """The head, the rows, the min/max line and the evidence, as the panel shows them."""
        text = Text()
        for part, style in (
            (self.head, "dim"),
            (self.rows, ""),
            (self.line, ""),
            (self.evidence, "yellow"),
        ):
            content = part.content
            shown = content.copy() if isinstance(content, Text) else Text(str(content), style)
            if shown.plain.strip():
                text.append_text(shown)
                if not shown.plain.endswith("\n"):
                    text.append("\n")
        text.rstrip()
        return text
