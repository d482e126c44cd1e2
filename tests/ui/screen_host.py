"""A bare app that shows one screen: snapshots of a screen that do not depend on the console's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.screen import Screen

import ddptui.ui

APP_TCSS = Path(ddptui.ui.__file__).parent / "app.tcss"


class ScreenHost(App[None]):
    """Pushes the screen `make` builds; what it is dismissed with lands in `results`."""

    CSS_PATH = APP_TCSS

    def __init__(self, make: Callable[[], Screen[Any]]) -> None:
        super().__init__()
        self.make = make
        self.results: list[Any] = []

    def on_mount(self) -> None:
        self.push_screen(self.make(), self.results.append)
