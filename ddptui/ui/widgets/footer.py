"""Provides SteadyFooter: Textual's Footer, rebuilt only when the keys it shows change (keys
only enabled or disabled are updated in place)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class SteadyFooter(Footer):
    """A Footer that rebuilds its keys only when the keys it shows change.

    Textual's Footer recomposes on every bindings signal, and each focus change sends one:
    stepping to the next log (a LogView like the last, same keys) rebuilt every key widget,
    which kept `]` off the screen for a few hundred ms. Keys that are only enabled or
    disabled (a run starting or ending) are changed in place.
    """

    _composed: Any = None

    def _keys(self, screen: Screen[object]) -> Any:
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
        keys = self._keys(screen)
        if self._composed is not None:
            if keys == self._composed:
                return
            if _only_enabled_differs(keys, self._composed):  # a run starts or ends
                self._composed = keys
                self._set_enabled(keys)
                return
        super().bindings_changed(screen)

    def _set_enabled(self, keys: Any) -> None:
        """Enable or disable the key widgets in place (as compose would make them: one per
        action, from its first binding): a rebuild lays out the whole screen, and a run's
        start changes several keys while its first lines flood in."""
        enabled: dict[str, bool] = {}
        for binding, _display, on, _tooltip in keys[0]:
            enabled.setdefault(binding.action, on)
        for key in self.query(FooterKey):
            off = not enabled.get(key.action, not key._disabled)
            if off != key._disabled:
                key._disabled = off  # what FooterKey's own click checks
                key.set_class(off, "-disabled")


def _only_enabled_differs(new: Any, old: Any) -> bool:
    """The same keys in the same order, only some enabled or disabled."""
    (shown, *rest), (was, *was_rest) = new, old
    return (
        rest == was_rest
        and len(shown) == len(was)
        and all(
            (b, display, tip) == (b0, display0, tip0)
            for (b, display, _, tip), (b0, display0, _, tip0) in zip(shown, was, strict=True)
        )
    )
