"""Provides SteadyFooter: Textual's Footer, rebuilt only when the keys it shows change."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer


class SteadyFooter(Footer):
    """A Footer that rebuilds its keys only when the keys it shows change.

    Textual's Footer recomposes on every bindings signal, and each focus change sends one:
    stepping to the next log (a LogView like the last, same keys) rebuilt every key widget,
    which kept `]` off the screen for a few hundred ms.
    """

    _composed: object = None

    def _keys(self, screen: Screen[object]) -> object:
        """What compose would draw: the shown bindings, as the app displays them."""
        active = screen.active_bindings
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        shown = [
            (binding, self.app.get_key_display(binding), enabled, tooltip)
            for _, binding, enabled, tooltip in active.values()
            if binding.show
        ]
        return (shown, palette, self.show_command_palette, self.compact)

    def compose(self) -> ComposeResult:
        self._composed = self._keys(self.screen) if self._bindings_ready else None
        yield from super().compose()

    def bindings_changed(self, screen: Screen[object]) -> None:
        if self._composed is not None and self._keys(screen) == self._composed:
            return
        super().bindings_changed(screen)
