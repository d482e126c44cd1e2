from __future__ import annotations

from tests.testbed.fixtures import *  # noqa: F401,F403
