"""Provides FollowingView: a line-API scroll view that follows its end until the operator
scrolls back, with the scroll keys (ids for the keymap) and the `g` prefix key."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.actions import SkipAction
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.scroll_view import ScrollView


class FollowingView(ScrollView, can_focus=True, inherit_bindings=False):
    """Follows new lines until the operator scrolls up (a key or the wheel stops following
    before it scrolls), and again once they are back at the end or press `end`. Textual's
    scroll bindings carry no ids, so they are redeclared with ids here.

    `g` is a prefix key: `logs.g` arms it and a `logs.g.*` binding fires only on the very next
    key press (vim's `gg`). Key presses are counted in `on_key`, which runs their bindings
    there rather than after the bubbling (never `if key == ...`).

    Subclasses draw the lines (`render_line`) and hear of every change of following or of
    the prefix through `_changed`.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        # Before logs.g: while the prefix is armed, the second key lands here.
        Binding("g", "after_g('top')", "Top of log (after g)", show=False, id="logs.g.top"),
        Binding("g", "arm_g", "Prefix g (g g: top)", show=False, id="logs.g"),
        Binding("up", "scroll_up", "Scroll up", show=False, id="logs.scroll_up"),
        Binding("down", "scroll_down", "Scroll down", show=False, id="logs.scroll_down"),
        Binding("left", "scroll_left", "Scroll left", show=False, id="logs.scroll_left"),
        Binding("right", "scroll_right", "Scroll right", show=False, id="logs.scroll_right"),
        Binding("pageup", "page_up", "Page up", show=False, id="logs.page_up"),
        Binding("pagedown", "page_down", "Page down", show=False, id="logs.page_down"),
        Binding("home", "scroll_home", "Top of log", show=False, id="logs.top"),
        Binding("end", "scroll_end", "End of log (follow)", show=False, id="logs.bottom"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.following = True
        self._keys = 0
        self._armed_at: int | None = None
        self._catch_up_pending = False

    def _changed(self) -> None:
        """Following or the prefix changed."""

    # -- following --------------------------------------------------------------------------

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)  # ScrollView's: the scrollbar, a redraw
        following = self.following
        if new_value >= self.max_scroll_y:
            self.following = True
        elif new_value < old_value:
            self.following = False
        if following != self.following:
            self._changed()

    def watch_virtual_size(self, size: Size) -> None:
        if self.following and self.is_on_screen:  # a hidden view catches up when shown
            self.catch_up()
            self._catch_up_after_refresh()

    def set_content_size(self, size: Size) -> None:
        """Give the view a new virtual size without laying out the screen.

        Textual's `virtual_size` reactive asks for a layout of the whole screen on every
        change; a view that grows every tick under a flood would reflow every widget every
        tick. Only this view's scrollbars and scroll limits depend on it, and those are
        updated here; a scrollbar that comes or goes still asks for a layout itself."""
        if size == self.virtual_size:
            return
        self.set_reactive(ScrollView.virtual_size, size)
        if self.is_on_screen:  # a hidden view's scrollbars are set when it shows (on_show)
            self._scroll_update(size)
            self.refresh()
            self.watch_virtual_size(size)

    def catch_up(self) -> None:
        """Go to the end if following. The deck calls it before it shows a view, so that the
        first frame of a view that got lines while hidden shows the newest. Forced: a view
        never laid out has no scrollbar yet, and its first layout clamps it to the real end."""
        self._catch_up_pending = False
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False, force=True)

    def _catch_up_after_refresh(self) -> None:
        """Again once laid out (the first scrollbar of a view comes with the layout), unless
        the operator has scrolled away by then (Widget.scroll_end would go regardless)."""
        if not self._catch_up_pending:
            self._catch_up_pending = True
            self.call_after_refresh(self.catch_up)

    def on_show(self, event: events.Show) -> None:
        """Shown: its scrollbars for the lines it got while hidden, and its end if following
        (also when shown by a click on its tab, which the deck does not see coming)."""
        self._scroll_update(self.virtual_size)
        self.catch_up()

    def set_following(self, following: bool) -> None:
        self.following = following
        if following:
            self.catch_up()
            self._catch_up_after_refresh()
        self._changed()

    def _stop_following(self) -> None:
        """Before a scroll back: a write landing before the scroll must not pull the view to
        the end again."""
        if self.following:
            self.following = False
            self._changed()

    def action_scroll_up(self) -> None:
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self._stop_following()
        self.scroll_up(animate=False, immediate=True)

    def action_page_up(self) -> None:
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self._stop_following()
        self.scroll_page_up(animate=False)

    def action_scroll_home(self) -> None:
        if not (self.allow_vertical_scroll or self.allow_horizontal_scroll):
            raise SkipAction()
        self._stop_following()
        self.scroll_home(animate=False, immediate=True, x_axis=self.scroll_y == 0)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        """Before Widget's own handler scrolls (it runs after this one)."""
        if not (event.ctrl or event.shift) and self.allow_vertical_scroll:
            self._stop_following()

    # -- the g prefix -----------------------------------------------------------------------

    async def on_key(self, event: events.Key) -> None:
        """Count the key for the prefix, and run its binding here, where the app would run
        it once the key had bubbled up through the deck's six containers: each is a message
        queue that a flood of lines keeps busy, and the wait was most of a key's latency.
        The binding is the one the screen's active bindings (keymap and `check_action`
        applied) give the key; one that is disabled or skips is left to bubble."""
        self._keys += 1
        active = self.screen.active_bindings.get(event.key)
        if (
            active is not None
            and active.enabled
            and await self.app.run_action(active.binding.action, active.node)
        ):
            event.stop()
            event.prevent_default()

    @property
    def prefix_armed(self) -> bool:
        return self._armed_at is not None and self._armed_at == self._keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "after_g":
            return self._armed_at is not None and self._armed_at == self._keys - 1
        return True

    def action_arm_g(self) -> None:
        self._armed_at = self._keys
        self._changed()

    def action_after_g(self, what: str) -> None:
        self._armed_at = None
        if what == "top":
            self.action_scroll_home()
        self._changed()

    def action_scroll_end(self) -> None:
        self.set_following(True)
