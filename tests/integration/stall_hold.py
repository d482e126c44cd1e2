"""What a stall held for minutes must show, read from a headless run's events (local, SSH)."""

from __future__ import annotations

import json
import select
import subprocess
import time
from typing import Any

HOLD_S = 180.0  # the stall must hold this long after it was first said
HANG_TIMEOUT = 20


def read_for(proc: subprocess.Popen[str], seconds: float) -> list[dict[str, Any]]:
    """Every event the run prints in `seconds` (or until it ends)."""
    assert proc.stdout is not None
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if not ready:
            continue
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def until_stalled(proc: subprocess.Popen[str], limit_s: float = 150) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            events.append(json.loads(line))
            if events[-1]["event"] in ("stall", "summary"):
                break
    return events


def assert_one_stall_held(before: list[dict[str, Any]], held: list[dict[str, Any]]) -> None:
    """One stall, stacks taken once, no rank back to running, every stall event with its time."""
    everything = before + held
    stalls = [e for e in everything if e["event"] == "stall"]
    assert stalls and all(isinstance(e.get("ts"), float) for e in stalls), stalls
    assert len([e for e in stalls if not e["groups"]]) == 1, stalls  # said once, at once
    assert len([e for e in everything if e["event"] == "stacks"]) == 1
    assert stalls[-1]["suspects"] == [1], stalls[-1]
    since = stalls[0]["ts"]
    moves = [e for e in everything if e["event"] == "rank" and e["ts"] > since]
    assert not [e for e in moves if e["state"] == "running"], moves[:4]
    assert not [e for e in moves if e["detail"] == "progress again"]
    assert not [e for e in held if e["event"] == "summary"]  # it ran on, stalled
