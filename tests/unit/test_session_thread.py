"""A Session on a thread of its own (as the console runs it): every line, in order, nothing lost.

Real processes: the local backend's node helper, log files and tail pipes, with a stand-in
for torchrun that floods its output with numbered lines (bench/flood_node.py).
"""

from __future__ import annotations

import asyncio
import gc
import re
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from ddptui.core.events import Event, NodeLines
from ddptui.core.job.spec import JobSpec, make_spec
from ddptui.core.session import Session
from ddptui.core.session_thread import GC_YOUNG_THRESHOLD, SWITCH_INTERVAL_S, SessionThread
from tests.procs import pids_with_tag

ROOT = Path(__file__).resolve().parents[2]
FLOOD = ROOT / "bench" / "flood_node.py"
SEQ = re.compile(r"seq=(\d+) ")


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))


def flood_spec(tmp_path: Path, nodes: int, lines: int, rate: float = 0.0) -> JobSpec:
    return make_spec(
        backend="local",
        nodes=nodes,
        nproc_per_node=1,
        script=str(FLOOD),
        script_args=("--lines", str(lines), "--rate", str(rate)),
        launcher=f"{sys.executable} {FLOOD}",
        workdir=str(tmp_path),
    )


class Lines:
    """What the consumer of the session's events saw: each node's sequence numbers, in the
    order they came, and the threads the events came in."""

    def __init__(self, slow_events: int = 0) -> None:
        self.seqs: dict[str, list[int]] = defaultdict(list)
        self.threads: set[str] = set()
        self.slow_events = slow_events
        self.first = threading.Event()

    def emit(self, event: Event) -> None:
        self.threads.add(threading.current_thread().name)
        if not isinstance(event, NodeLines):
            return
        for text, rank, _ in event.lines:
            match = SEQ.search(text)
            if rank is not None and match:
                self.seqs[event.node].append(int(match.group(1)))
        self.first.set()
        if self.slow_events > 0:  # a consumer slower than the nodes: the session waits
            self.slow_events -= 1
            time.sleep(0.05)


def on_disk(session: Session) -> dict[str, int]:
    logs = sorted((session.run.path / "nodes").glob("*.log"))
    return {p.stem: p.read_bytes().count(b"step-ok\n") for p in logs}


async def test_a_flood_arrives_whole_and_in_order_per_node_from_the_session_thread(
    tmp_path: Path,
) -> None:
    lines = Lines()
    settings: set[tuple[float, int]] = set()

    def emit(event: Event) -> None:
        settings.add((sys.getswitchinterval(), gc.get_threshold()[0]))
        lines.emit(event)

    before = (sys.getswitchinterval(), gc.get_threshold())
    session = Session(flood_spec(tmp_path, nodes=4, lines=20_000), emit)
    summary = await SessionThread(session).run()

    assert summary.ok, summary.detail
    # while it ran: quick handovers, rare young collections; then as they were
    assert settings == {(SWITCH_INTERVAL_S, GC_YOUNG_THRESHOLD)}
    assert (sys.getswitchinterval(), gc.get_threshold()) == before
    assert lines.threads == {f"session {session.run_id}"}  # not the awaiting thread
    assert sorted(lines.seqs) == [f"local{i}" for i in range(4)]
    for node, seqs in lines.seqs.items():
        assert seqs == list(range(20_000)), node
    assert sum(on_disk(session).values()) == 4 * 20_000


async def test_a_consumer_slower_than_the_nodes_loses_nothing(tmp_path: Path) -> None:
    """Back-pressure: while the consumer holds the session up, the nodes write on into their
    log files and pipes; the session reads the rest when it catches up."""
    lines = Lines(slow_events=60)
    session = Session(flood_spec(tmp_path, nodes=4, lines=30_000), lines.emit)
    summary = await SessionThread(session).run()

    assert summary.ok, summary.detail
    assert lines.slow_events == 0
    for node, seqs in lines.seqs.items():
        assert seqs == list(range(30_000)), node
    assert list(on_disk(session).values()) == [30_000] * 4


async def test_teardown_asked_from_the_awaiting_thread_stops_the_run(tmp_path: Path) -> None:
    lines = Lines()
    session = Session(flood_spec(tmp_path, nodes=2, lines=1_000_000, rate=200), lines.emit)
    thread = SessionThread(session)
    runner = asyncio.ensure_future(thread.run())
    assert await asyncio.to_thread(lines.first.wait, 120)  # set in the session's thread
    thread.request_teardown()  # from this thread, not the session's
    summary = await runner

    assert summary.stopped_by == "operator"
    assert all(report.clean for report in session.teardown_reports.values())
    assert pids_with_tag(f"{session.run_id}.") == []
    for node, seqs in lines.seqs.items():
        assert seqs == list(range(len(seqs))), node
