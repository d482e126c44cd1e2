"""Provides RankStackScreen: one rank's whole stack, every thread, as its node took it."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static


class RankStackScreen(ModalScreen[None]):
    """A rank's threads, innermost frame first; Escape goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "dismiss", "Back", id="stack.close"),
    ]

    DEFAULT_CSS = """
    RankStackScreen { align: center middle; }
    RankStackScreen > VerticalScroll {
        width: 90%; height: 80%; border: round $accent; padding: 0 1; background: $surface;
    }
    """

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = self.title_text
            yield Static(self.text, markup=False)
        yield Footer()
