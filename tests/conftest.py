"""Puts the repository root on sys.path, so every test directory imports `tests.*` helpers."""

from __future__ import annotations

import sys
from pathlib import Path

# Plain `pytest` (unlike `python -m pytest`) does not put the repository root on sys.path.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

pytest_plugins = ["tests.tiers"]
