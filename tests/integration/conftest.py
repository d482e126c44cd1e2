"""Makes the testbed fixtures available to this directory's tests."""

from __future__ import annotations

from tests.testbed.fixtures import *  # noqa: F403
