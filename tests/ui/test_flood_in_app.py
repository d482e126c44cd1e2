"""A log flood in the real app: the session runs in a process of its own, every line is ingested
(and on screen or counted as skipped), and keys work while the lines pour in."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ddptui.core.events import Event
from ddptui.core.session.wire import LineBlock
from ddptui.ui.app import DdpApp
from tests.cases import flood_spec

from .conftest import SIZE, wait_for

NODES, LINES, RATE = 4, 40_000, 5_000.0  # per node: 8 s of flood


async def test_a_flood_is_ingested_whole_off_the_app_thread_while_keys_work(
    tmp_path: Path,
) -> None:
    app = DdpApp(flood_spec(tmp_path, NODES, LINES, RATE))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        emitted_in: set[str] = set()
        shown = {"entries": 0, "skipped": 0}
        emit, take_block, drain = screen.relay.emit, screen.relay.take_block, screen.relay.drain

        def counting_emit(event: Event) -> None:
            emitted_in.add(threading.current_thread().name)
            emit(event)

        def counting_take_block(block: LineBlock) -> None:
            emitted_in.add(threading.current_thread().name)
            take_block(block)

        def counting_drain(*args: Any) -> tuple[list[Any], dict[str, int]]:
            entries, dropped = drain(*args)
            shown["entries"] += len(entries)
            shown["skipped"] += sum(dropped.values())
            return entries, dropped

        screen.relay.emit = counting_emit  # type: ignore[method-assign]
        screen.relay.take_block = counting_take_block  # type: ignore[method-assign]
        screen.relay.drain = counting_drain  # type: ignore[method-assign]
        await pilot.press("l")
        await wait_for(pilot, lambda: screen.relay.lines_seen > 1000, "the flood to start")
        before = screen.logs.active_view
        await pilot.press("]")
        await wait_for(
            pilot, lambda: screen.logs.active_view is not before, "`]` to show the next log"
        )
        assert screen.job_active  # the key was handled while the nodes still flooded
        await wait_for(pilot, lambda: screen.summary is not None, "the run to end")
        assert screen.summary is not None and screen.summary.ok, screen.summary
        assert screen.session is not None
        run_path, run_id = screen.session.run.path, screen.session.run_id
        assert screen.session.process is not None
        assert screen.session.process.pid != os.getpid()

        assert emitted_in == {f"session {run_id}"}  # its reader thread, not the app's
        assert threading.current_thread().name not in emitted_in
        logs = [p.read_bytes() for p in (run_path / "nodes").glob("*.log")]
        assert sorted(log.count(b"step-ok\n") for log in logs) == [LINES] * NODES
        assert screen.relay.lines_seen == sum(log.count(b"\n") for log in logs)  # all ingested
        assert shown["entries"] + shown["skipped"] == screen.relay.lines_seen
        for node in screen.logs.nodes:  # each pane shows its node's lines, or says it skipped
            pane = screen.logs.pane(node)
            assert pane is not None and pane.line_count > 0
            last = pane.lines[-1]
            assert "flood done lines=40000" in last or "skipped" in last, (node, last)
