"""A bare app that composes one widget alone, as Textual's own widget tests do."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widget import Widget


class WidgetHost(App[None]):
    """Shows `widget` alone (its DEFAULT_CSS only) and focuses it. A test that needs the
    messages a widget posts subclasses it with the handler."""

    def __init__(self, widget: Widget) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget

    def on_mount(self) -> None:
        self.widget.focus()
