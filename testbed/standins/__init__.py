"""Provides the stand-ins for torchrun, started by path as a job's launcher: `FLOOD_NODE`
floods rank-prefixed lines, `FAKE_TORCHRUN` prints a big job's rendezvous and ranks, and
`FLEET_STANDIN` reports one rank and holds until killed."""

from __future__ import annotations

from pathlib import Path

STANDINS = Path(__file__).resolve().parent
FLOOD_NODE = STANDINS / "flood_node.py"
FAKE_TORCHRUN = STANDINS / "fake_torchrun.py"
FLEET_STANDIN = STANDINS / "fleet_standin.sh"
