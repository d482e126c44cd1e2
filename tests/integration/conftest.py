"""Makes the testbed fixtures available to this directory's tests."""

from __future__ import annotations

from testbed.fixtures import *  # noqa: F403
