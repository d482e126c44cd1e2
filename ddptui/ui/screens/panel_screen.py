"""Provides PanelScreen: one side panel full screen, its whole text kept current; Escape closes."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from ddptui.ui.widgets.side_panel import PanelScroll, SidePanel

REFRESH_S = 0.5  # the panel goes on changing under the view while the run goes on


class PanelScreen(ModalScreen[None]):
    """What a side panel shows, at the terminal's full size: what the side column clips (a
    long traceback, every restart round) reads here, and scrolls with the panel's keys."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "dismiss", "Back", id="panel.close"),
    ]

    DEFAULT_CSS = """
    PanelScreen { align: center middle; }
    PanelScreen > PanelScroll {
        width: 100%; height: 1fr; border: round $accent; padding: 0 1; background: $surface;
    }
    PanelScreen > PanelScroll > Static { width: 100%; }
    """

    def __init__(self, panel: SidePanel) -> None:
        super().__init__()
        self.panel = panel
        self.text = panel.full_text()
        self.body = Static(self.text)
        self.scroll = PanelScroll()

    def compose(self) -> ComposeResult:
        self.scroll.border_title = self.panel.panel_title
        with self.scroll:
            yield self.body
        yield Footer()

    def on_mount(self) -> None:
        self.scroll.focus()
        self.set_interval(REFRESH_S, self.refresh_text)

    def refresh_text(self) -> None:
        """The panel's text again, redrawn only when it changed."""
        text = self.panel.full_text()
        if text != self.text:
            self.text = text
            self.body.update(text)
