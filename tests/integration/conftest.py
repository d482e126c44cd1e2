"""Makes the testbed fixtures available to this directory's tests."""

from __future__ import annotations

import sys
from pathlib import Path

# Plain `pytest` (unlike `python -m pytest`) does not put the repo root on sys.path for
# this non-package directory; the root is needed to import the `tests.testbed` package.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.testbed.fixtures import *  # noqa: E402, F403
