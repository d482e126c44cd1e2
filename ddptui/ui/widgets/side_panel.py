"""Provides SidePanel: a panel of the console's side column that scrolls by keys once focused
and gives its whole content to the full-screen view (PanelScroll: the scrolling alone)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll


class PanelScroll(VerticalScroll, can_focus=True, inherit_bindings=False):
    """A vertical scroll whose keys carry ids (Textual's carry none), so a keymap can move
    them; the side panels and their full-screen view scroll with the same keys."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_up", "Scroll up", show=False, id="panel.scroll_up"),
        Binding("down", "scroll_down", "Scroll down", show=False, id="panel.scroll_down"),
        Binding("pageup", "page_up", "Page up", show=False, id="panel.page_up"),
        Binding("pagedown", "page_down", "Page down", show=False, id="panel.page_down"),
        Binding("home", "scroll_home", "Top of panel", show=False, id="panel.top"),
        Binding("end", "scroll_end", "End of panel", show=False, id="panel.bottom"),
    ]


class SidePanel(PanelScroll):
    """A side panel: kept to a few lines in the side column (app.tcss), it scrolls there once
    focused (tab, or a click), and `full_text` is what the full-screen view shows of it.

    `panel_title` names it in the full-screen view; `shown` says whether the side shows it now.
    """

    panel_title = "Panel"

    @property
    def shown(self) -> bool:
        return self.has_class("-shown")

    def full_text(self) -> Text:
        """Everything the panel shows, as one text (the full-screen view's)."""
        raise NotImplementedError
