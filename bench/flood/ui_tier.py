"""Provides the UI tier of the log flood: the real DdpApp under Pilot, with key-to-screen probes.

Key-to-screen latency is the time from posting a key (as Pilot does) to the first frame the
app renders after the key's effect is in the widget tree (bench/common/pilot.py). Three keys, in
turn: `]` (next node's log: a tab switch, a layout change), `up` (scroll the focused log: the
pane stops following) and `end` (follow again).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common.pilot import FrameProbe, log_keys_round
from bench.common.stats import cpu_s, peak_rss_mb, percentile


class SessionProcessUse:
    """The session process's CPU time and peak RSS, read from /proc while it runs (it is not
    this process's child for getrusage until it is waited for, and then with its own)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.rss_mb = 0.0

    def sample(self, pid: int) -> None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        self.cpu_s = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                self.rss_mb = int(line.split()[1]) / 1024

    async def follow(self, screen: Any) -> None:
        while True:
            process = getattr(screen.session, "process", None)
            if process is not None:
                self.sample(process.pid)
            await asyncio.sleep(0.2)


def _all_lines(run_path: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in (run_path / "nodes").glob("*.log"))


async def ui_run(spec: Any, ingest: Any, on_disk: Callable[[Path], int]) -> dict[str, Any]:
    """Launch `spec` in the app with `l`, probe keys until the run is over, report.

    Where the session runs in a process of its own (its lines reach the app as blocks of
    what the screen shows), the lines it ingested are its own count (`LineBlock.seen`, every
    line of the nodes' logs, less those that are not the flood's), and its CPU time and peak
    RSS add to the app's; a tree whose session runs in the app's process is measured as
    before (every NodeLines event the relay gets)."""
    from ddptui.core.events import NodeLines
    from ddptui.ui.app import DdpApp

    app = DdpApp(spec)
    shown = {"lines": 0, "skipped": 0}
    latencies: dict[str, list[float]] = {
        "switch log (])": [],
        "scroll (up)": [],
        "follow (end)": [],
    }
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.job_screen
        relay_emit, relay_drain = screen.relay.emit, screen.relay.drain
        relay_take_block = getattr(screen.relay, "take_block", None)
        blocks = {"seen": 0}

        def emit(event: Any) -> None:
            if isinstance(event, NodeLines):
                ingest.saw(event)
            relay_emit(event)

        def take_block(block: Any) -> None:
            ingest.saw_block(block)
            blocks["seen"] = block.seen
            assert relay_take_block is not None
            relay_take_block(block)

        def drain(*args: Any) -> tuple[list[Any], dict[str, int]]:
            """What the screen takes for its log views each tick, and what was skipped."""
            entries, dropped = relay_drain(*args)
            shown["lines"] += len(entries)
            shown["skipped"] += sum(dropped.values())
            return entries, dropped

        screen.relay.emit = emit  # type: ignore[method-assign]
        screen.relay.drain = drain  # type: ignore[method-assign]
        if relay_take_block is not None:
            screen.relay.take_block = take_block  # type: ignore[method-assign]
        session_use = SessionProcessUse()
        following = asyncio.ensure_future(session_use.follow(screen))
        probe = FrameProbe(app)
        await pilot.press("l")
        while screen.job_active:
            await log_keys_round(pilot, screen, probe, latencies)
        deadline = time.monotonic() + 30
        while screen.summary is None and time.monotonic() < deadline:
            await pilot.pause(0.1)
        following.cancel()
        assert screen.session is not None
        ok = bool(screen.summary and screen.summary.ok)
        run_path = screen.session.run.path
        in_process = getattr(screen.session, "process", None) is not None

    def stats(values: list[float]) -> dict[str, float]:
        """Percentiles of the presses that reached the screen; `lost`: those that never did."""
        seen = [v for v in values if v != float("inf")]
        return {
            "p50": percentile(seen, 50),
            "p99": percentile(seen, 99),
            "n": len(values),
            "lost": len(values) - len(seen),
        }

    every = stats([v for values in latencies.values() for v in values])
    flood_lines = on_disk(run_path)
    counted = ingest.result()
    if in_process:  # the session's own count; the lines that are not the flood's left out
        counted["ingested"] = blocks["seen"] - (_all_lines(run_path) - flood_lines)
        counted["ingest_per_s"] = counted["ingested"] / counted["span_s"]
    return {
        **counted,
        "ok": ok,
        "on_disk": flood_lines,
        "session_process": in_process,
        **shown,
        "key_p50": every["p50"],
        "key_p99": every["p99"],
        "key_n": every["n"],
        "key_lost": every["lost"],
        "keys": {name: stats(v) for name, v in latencies.items()},
        "frame_p50": percentile(probe.frames, 50),
        "frame_p99": percentile(probe.frames, 99),
        "frames": len(probe.frames),
        "rss_mb": peak_rss_mb() + session_use.rss_mb,
        "app_rss_mb": peak_rss_mb(),
        "session_rss_mb": session_use.rss_mb,
        "cpu_s": cpu_s() + session_use.cpu_s,
        "session_cpu_s": session_use.cpu_s,
    }
