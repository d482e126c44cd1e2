"""Points pytest-playwright's launch arguments at Debian's Chromium, with the flags root in a
container needs. Only its launch arguments (they take `--headed`, `--slowmo`): its
session-wide browser would keep Playwright's event loop on the main thread for the rest of
the suite, so the browser tests start their own per module (test_serve_browser.py)."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.browser import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}
