"""Provides SteadyFooter: Textual's Footer in pages that fit the terminal (a key flips them),
rebuilt only when the keys it shows change (keys only enabled or disabled are updated in
place)."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

PAGE_BINDING = "footer.page"


def key_width(key: FooterKey) -> int:
    """The cells a key takes in a footer that is not compact: ` key description `."""
    if not key.description:
        return cell_len(key.key_display) + 2
    return cell_len(key.key_display) + cell_len(key.description) + 3


def paginate(widths: list[int], room: int, room_with_more: int) -> list[int]:
    """Each key's page: one page when every key fits in `room`; else pages of what fits in
    `room_with_more` (the room left beside the key that flips them), in order."""
    if sum(widths) <= room:
        return [0] * len(widths)
    pages, page, used = [], 0, 0
    for width in widths:
        if used and used + width > room_with_more:
            page, used = page + 1, 0
        pages.append(page)
        used += width
    return pages


class SteadyFooter(Footer):
    """A Footer in pages, rebuilding its keys only when the keys it shows change.

    Pages: at 80 columns Textual's one row ends a third of the way through the console's
    keys. The keys are laid out in pages that each fit the row, in the order Textual gives
    (the focused widget's first), with the key bound to `page_binding` after them saying
    which page shows (`. more 1/3`); that key flips to the next page. Only which keys show
    changes, in place: flipping or resizing rebuilds nothing.

    Steady: Textual's Footer recomposes on every bindings signal, and each focus change sends
    one: stepping to the next log (a LogView like the last, same keys) rebuilt every key
    widget, which kept `]` off the screen for a few hundred ms. Keys that are only enabled
    or disabled (a run starting or ending) are changed in place.
    """

    _composed: Any = None

    def __init__(self, *, page_binding: str = PAGE_BINDING) -> None:
        super().__init__()
        self.page_binding = page_binding
        self.page = 0
        self.pages = 1
        self._paged: list[FooterKey] = []
        self._palette: FooterKey | None = None
        self._more: FooterKey | None = None

    def _page_key(self, screen: Screen[object]) -> Binding | None:
        """The binding that flips the pages, with the key the keymap gives it."""
        for _, binding, _enabled, _tooltip in screen.active_bindings.values():
            if binding.id == self.page_binding:
                return binding
        return None

    def compose(self) -> ComposeResult:
        self._composed = self._keys(self.screen) if self._bindings_ready else None
        self._paged, self._palette, self._more = [], None, None
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                if widget.has_class("-command-palette"):
                    self._palette = widget
                else:
                    self._paged.append(widget)
            yield widget
        binding = self._page_key(self.screen) if self._bindings_ready else None
        if binding is not None:
            display = self.app.get_key_display(binding)
            self._more = FooterKey(binding.key, display, "more", binding.action)
            self._more.tooltip = binding.description
            yield self._more
        self._lay_out_pages()

    def on_resize(self, event: events.Resize) -> None:
        self._lay_out_pages()

    def next_page(self) -> None:
        """The next page of keys (the first after the last)."""
        self.page += 1
        self._lay_out_pages()

    def shown_keys(self) -> list[FooterKey]:
        """The keys the page showing now holds (the page key and the palette's aside)."""
        return [key for key in self._paged if key.display]

    def _lay_out_pages(self) -> None:
        width = self.size.width or self.app.size.width
        palette = key_width(self._palette) + 2 if self._palette is not None else 0
        room = width - palette
        more = self._more
        widths = [key_width(key) for key in self._paged]
        flip = cell_len(more.key_display) + len("more 9/9") + 3 if more else 0
        pages = paginate(widths, room, room - flip)
        if more is None:
            pages = [0] * len(widths)
        self.pages = (pages[-1] + 1) if pages else 1
        self.page %= self.pages
        for key, page in zip(self._paged, pages, strict=True):
            key.display = page == self.page
        if more is not None:
            more.display = self.pages > 1
            more.description = f"more {self.page + 1}/{self.pages}"
            more.refresh(layout=True)

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
