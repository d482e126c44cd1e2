"""Provides the suite's holds and run lengths, read from the environment with the defaults
that prove the point: `DDPTUI_TEST_HOLD_S=30 python3 -m pytest ...` shortens every stall hold
for a quick look; the suite's own command leaves them as they are."""

from __future__ import annotations

import os


def seconds(name: str, default: float) -> float:
    """`DDPTUI_TEST_<name>` in seconds, else `default`; a value that is not a number fails."""
    raw = os.environ.get(f"DDPTUI_TEST_{name}", "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"DDPTUI_TEST_{name}={raw!r} is not a number of seconds") from None


# A stall must still be a stall this long after it was first said (tests/integration/stall_hold.py).
HOLD_S = seconds("HOLD_S", 180.0)
# A balanced job runs at least this long and no rank is named a straggler.
BALANCED_S = seconds("BALANCED_S", 180.0)
# A quiet checkpoint's length (tests/integration/test_quiet_phases.py); the hang timeout scales
# with it (60 s against 150 s), so a shorter one still proves the phase learned, not the floor.
CHECKPOINT_S = seconds("CHECKPOINT_S", 150.0)
