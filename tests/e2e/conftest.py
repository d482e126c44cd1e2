"""Points pytest-playwright at Debian's Chromium, with the flags root in a container needs."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.browser import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}
