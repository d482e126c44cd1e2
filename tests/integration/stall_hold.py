"""What a stall held for minutes must show, read from a headless run's events (local, SSH)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any

from tests.knobs import HOLD_S

__all__ = ["HOLD_S", "HANG_TIMEOUT", "EventReader", "assert_one_stall_held"]

HANG_TIMEOUT = 20


class EventReader:
    """A headless run's events, read by a thread as they come (select() on the pipe would
    miss lines already in the reader's buffer)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.stdout = proc.stdout
        self.events: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def until(self, kind: str, limit_s: float) -> list[dict[str, Any]]:
        """The events up to the first of `kind` (or all there are after `limit_s`)."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and self.thread.is_alive():
            kinds = [e["event"] for e in self.events]
            if kind in kinds:
                return self.events[: kinds.index(kind) + 1]
            time.sleep(0.5)
        return list(self.events)

    def to_the_end(self, limit_s: float) -> list[dict[str, Any]]:
        self.thread.join(limit_s)
        return list(self.events)


def assert_one_stall_held(events: list[dict[str, Any]]) -> None:
    """One stall, stacks taken once, no rank back to running, every stall event with its time;
    `events` run from the launch to HOLD_S after the stall was first said."""
    stalls = [e for e in events if e["event"] == "stall"]
    assert stalls and all(isinstance(e.get("ts"), float) for e in stalls), stalls
    assert len([e for e in stalls if not e["groups"]]) == 1, stalls  # said once, at once
    kinds = [e["event"] for e in events]
    assert kinds.count("stacks") == 1, kinds[-30:]
    assert stalls[-1]["suspects"] == [1], stalls[-1]
    since = stalls[0]["ts"]
    moves = [e for e in events if e["event"] == "rank" and e["ts"] > since]
    assert not [e for e in moves if e["state"] == "running"], moves[:4]
    assert not [e for e in moves if e["detail"] == "progress again"]
    assert "summary" not in kinds  # it ran on, stalled
