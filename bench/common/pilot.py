"""Provides Pilot helpers shared by the UI benchmarks: posting keys, timing frames, a round of
the log keys.

Frames are taken where Textual hands them to its driver (`App._display`) and serialised there
as a terminal driver would, so their cost counts even under the headless test driver.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

KEY_TIMEOUT_S = 5.0
PRESS_EVERY_S = 0.1  # between the keys of a round


def press_key(pilot: Any, key: str, char: str | None) -> None:
    """Post a key as Pilot.press does, without its wait for the app to go idle (under a
    flood it never does, and that wait is what is measured here)."""
    from textual import events

    event = events.Key(key, char)
    event.set_sender(pilot.app)
    pilot.app._driver.send_message(event)


class FrameProbe:
    """Wraps App._display: times every frame and resolves the pending key's future."""

    def __init__(self, app: Any) -> None:
        from textual._compositor import CompositorUpdate

        self._update_type = CompositorUpdate
        self.app = app
        self.frames: list[float] = []
        self._display = app._display
        self._check: Callable[[], bool] | None = None
        self._seen: asyncio.Future[float] | None = None
        app._display = self.frame

    def frame(self, screen: Any, renderable: Any) -> None:
        t0 = time.perf_counter()
        self._display(screen, renderable)
        if isinstance(renderable, self._update_type):
            renderable.render_segments(self.app.console)  # what a terminal would be sent
        self.frames.append(time.perf_counter() - t0)
        if self._seen is not None and not self._seen.done() and self._check and self._check():
            self._seen.set_result(time.perf_counter())

    async def key(self, pilot: Any, key: str, char: str | None, shows: Callable[[], bool]) -> float:
        """Seconds from posting `key` to the first frame after `shows()` became true."""
        return await self.after(lambda: press_key(pilot, key, char), shows)

    async def after(
        self, act: Callable[[], object], shows: Callable[[], bool], timeout: float = KEY_TIMEOUT_S
    ) -> float:
        """Seconds from `act()` to the first frame rendered once `shows()` is true (inf if
        none came within `timeout`)."""
        self._check = shows
        self._seen = asyncio.get_running_loop().create_future()
        pressed = time.perf_counter()
        act()
        try:
            seen = await asyncio.wait_for(asyncio.shield(self._seen), timeout)
        except TimeoutError:
            return float("inf")
        finally:
            self._check, self._seen = None, None
        return seen - pressed


async def log_keys_round(
    pilot: Any, screen: Any, probe: FrameProbe, latencies: dict[str, list[float]]
) -> None:
    """One round of the log keys on the job screen, each timed to its frame: `]` (next node's
    log), `up` (the pane stops following), `end` (it follows again)."""
    before = screen.logs.active_view  # what every tree's deck says, whatever draws its tabs
    latencies["switch log (])"].append(
        await probe.key(
            pilot, "right_square_bracket", "]", lambda: screen.logs.active_view is not before
        )
    )
    await asyncio.sleep(PRESS_EVERY_S)
    pane = screen.logs.active_view

    def at_end() -> bool:
        return bool(pane.following and pane.scroll_y >= pane.max_scroll_y)

    async def end() -> None:
        latencies["follow (end)"].append(await probe.key(pilot, "end", None, at_end))
        await asyncio.sleep(PRESS_EVERY_S)

    if pane.max_scroll_y < 2:
        return
    if not at_end():  # a view shown after it got lines while hidden may sit at its top
        await end()
    # Its effect: the view has stopped following and sits above its end. Not "above where
    # it was": lines arriving between the press and its handling move the end (and the
    # view, while it follows) further down, so the old place can stay above the new one.
    latencies["scroll (up)"].append(
        await probe.key(
            pilot, "up", None, lambda: not pane.following and pane.scroll_y < pane.max_scroll_y
        )
    )
    await asyncio.sleep(PRESS_EVERY_S)
    await end()
