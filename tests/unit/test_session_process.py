"""A Session in a process of its own (as the console runs it): every line accounted for, in
order per node, requests from the console, and a console that goes away mid-run.

Real processes: the session's own, the local backend's node helper, log files and tail
pipes, with a stand-in for torchrun that floods its output with numbered lines
(testbed/standins/flood_node.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from ddptui.core.events import Event, NodeLines
from ddptui.core.job.spec import JobSpec, make_spec
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.session import child as session_child
from ddptui.core.session import process as session_process
from ddptui.core.session.process import SessionProcess, SessionProcessError
from ddptui.core.session.session import Session
from ddptui.core.session.wire import LineBlock
from tests.cases import flood_spec
from tests.procs import pids_with_tag

ROOT = Path(__file__).resolve().parents[2]
SEQ = re.compile(r"seq=(\d+) ")


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))


class Console:
    """What the console saw of the session: each node's sequence numbers in the order they
    came, the lines left out per node, every line the session counted, the events' kinds
    and the threads it all came in."""

    def __init__(self, slow_blocks: int = 0) -> None:
        self.seqs: dict[str, list[int]] = defaultdict(list)
        self.received = 0
        self.dropped: Counter[str] = Counter()
        self.seen = 0
        self.kinds: list[str] = []
        self.threads: set[str] = set()
        self.slow_blocks = slow_blocks
        self.first = threading.Event()

    def emit(self, event: Event) -> None:
        self.threads.add(threading.current_thread().name)
        self.kinds.append(event.kind)

    def lines(self, block: LineBlock) -> None:
        self.threads.add(threading.current_thread().name)
        assert block.seen >= self.seen
        self.seen = block.seen
        self.dropped.update(block.dropped)
        for batch in block.batches:
            assert isinstance(batch, NodeLines)
            self.received += len(batch.lines)
            for text, rank, _ in batch.lines:
                match = SEQ.search(text)
                if rank is not None and match:
                    self.seqs[batch.node].append(int(match.group(1)))
        self.first.set()
        if self.slow_blocks > 0:  # a console slower than the nodes
            self.slow_blocks -= 1
            time.sleep(0.5)


def autogroups(*pids: int) -> list[list[str]] | None:
    """Each process's autogroup (`/autogroup-12 nice 5`, split); None without autogroups.

    The file is missing where the kernel has no autogroups, and empty for a process whose
    CPU group is a cgroup (a container's), where autogroups do not apply.
    """
    try:
        groups = [Path(f"/proc/{pid}/autogroup").read_text().split() for pid in pids]
    except FileNotFoundError:
        return None
    return groups if all(groups) else None


def on_disk(run: RunDir) -> dict[str, int]:
    logs = sorted((run.path / "nodes").glob("*.log"))
    return {p.stem: p.read_bytes().count(b"step-ok\n") for p in logs}


def lines_on_disk(run: RunDir) -> int:
    """Every line of every node's log (the flood's and the agent's own)."""
    return sum(p.read_bytes().count(b"\n") for p in (run.path / "nodes").glob("*.log"))


def assert_accounted(console: Console, run: RunDir, nodes: int) -> None:
    """Every line the session ingested either reached the console, in order, once, or was
    counted as left out (oldest first: a block carries the newest lines)."""
    assert console.seen == lines_on_disk(run)  # the session ingested every line
    assert console.received + sum(console.dropped.values()) == console.seen
    assert set(console.seqs) <= {f"local{i}" for i in range(nodes)}
    for node, seqs in console.seqs.items():
        assert seqs == sorted(set(seqs)), f"{node}: out of order or twice"


async def test_a_flood_is_accounted_for_line_by_line_from_the_sessions_process(
    tmp_path: Path,
) -> None:
    console = Console()
    session = SessionProcess(flood_spec(tmp_path, 4, 20_000), console.emit, console.lines)
    summary = await session.serve()

    assert summary.ok, summary.detail
    assert session.process is not None and session.process.pid != os.getpid()
    assert console.threads == {f"session {session.run_id}"}  # its reader, not this thread
    assert_accounted(console, session.run, 4)
    assert list(on_disk(session.run).values()) == [20_000] * 4
    assert console.kinds.count("summary") == 1 and "plan" in console.kinds
    assert session.plan is not None
    assert session.plan.node_names == ("local0", "local1", "local2", "local3")
    assert (session.run.path / "events.jsonl").is_file()  # the run's records, by the process


async def test_a_console_slower_than_the_nodes_holds_up_nothing(tmp_path: Path) -> None:
    """Back-pressure stops at the console: while it is slow, the session ingests on (its
    blocks leave out what the console has not taken yet, counted), and the run directory
    gets every line."""
    console = Console(slow_blocks=3)
    session = SessionProcess(flood_spec(tmp_path, 4, 30_000), console.emit, console.lines)
    summary = await session.serve()

    assert summary.ok, summary.detail
    assert console.slow_blocks == 0
    assert sum(console.dropped.values()) > 0  # the session went on while the console slept
    assert_accounted(console, session.run, 4)
    assert list(on_disk(session.run).values()) == [30_000] * 4


async def test_teardown_asked_by_the_console_stops_the_run(tmp_path: Path) -> None:
    console = Console()
    spec = flood_spec(tmp_path, 2, 1_000_000, rate=200)
    session = SessionProcess(spec, console.emit, console.lines)
    runner = asyncio.ensure_future(session.serve())
    assert await asyncio.to_thread(console.first.wait, 120)
    assert session.process is not None
    groups = autogroups(session.process.pid, os.getpid())
    if groups is not None:  # Linux's autogroups: the session's group weighs less
        assert groups[0][0] != groups[1][0] and groups[0][-1] == str(session_child.AUTOGROUP_NICE)
    session.request_teardown()
    summary = await runner

    assert summary.stopped_by == "operator"
    assert sorted(session.teardown_reports) == ["local0", "local1"]
    assert all(report.clean for report in session.teardown_reports.values())
    assert pids_with_tag(f"{session.run_id}.") == []
    for node, seqs in console.seqs.items():
        assert seqs == sorted(set(seqs)), node


async def test_a_killed_session_process_is_an_error_naming_its_log(tmp_path: Path) -> None:
    console = Console()
    spec = flood_spec(tmp_path, 1, 1_000_000, rate=100)
    session = SessionProcess(spec, console.emit, console.lines)
    runner = asyncio.ensure_future(session.serve())
    try:
        assert await asyncio.to_thread(console.first.wait, 120)
        assert session.process is not None
        session.process.send_signal(signal.SIGKILL)
        with pytest.raises(SessionProcessError, match=r"exit code -9.*session\.log"):
            await runner
    finally:  # the job outlives its session by design: stop it the way `attach` would
        await teardown_by_attach(spec, session.run_id)
    assert pids_with_tag(f"{session.run_id}.") == []


async def teardown_by_attach(spec: JobSpec, run_id: str) -> None:
    session = Session(spec, lambda _e: None, run=RunDir.open(run_id))
    session.request_teardown()
    await session.run_job()


CONSOLE_DIES = """
import asyncio, os, sys, threading
from ddptui.core.session.process import SessionProcess
from tests.cases import flood_spec
from pathlib import Path

async def main():
    first = threading.Event()
    session = SessionProcess(flood_spec(Path(sys.argv[1]), 2, 1_000_000, rate=100),
                             lambda e: None, lambda b: first.set())
    asyncio.ensure_future(session.serve())
    await asyncio.to_thread(first.wait, 120)
    print(session.run_id, session.process.pid, flush=True)
    os._exit(0)  # the console dies outright: no teardown, no detach asked

asyncio.run(main())
"""


def test_a_console_that_dies_leaves_its_job_running_and_detached(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CONSOLE_DIES, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=True,
    )
    run_id, pid = out.stdout.split()
    run = RunDir.open(run_id)
    try:
        deadline = time.monotonic() + 60
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(f"/proc/{pid}").exists(), "the session's process outlived its console"
        assert pids_with_tag(f"{run_id}.") != [], "the job must run on"
        summary = json.loads((run.path / "summary.json").read_text())
        assert summary["stopped_by"] == "detached"
    finally:
        asyncio.run(teardown_by_attach(flood_spec(tmp_path, 2, 1), run_id))
    assert pids_with_tag(f"{run_id}.") == []


SAYS_ITS_ENV = """
import os, sys
print("DDPTUI_TEST_LATE=" + os.environ.get("DDPTUI_TEST_LATE", "unset"), flush=True)
"""


async def test_a_spare_session_process_runs_the_job_in_the_consoles_environment_of_the_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spare starts before the launch; what the console's environment says at the launch
    (a variable set since, a state directory) is what the run gets, and its output goes to
    the run's session.log."""
    session_process.prepare_spare()
    spare = session_process._spare
    assert spare is not None
    monkeypatch.setenv("DDPTUI_TEST_LATE", "set-after-the-spare")
    script = tmp_path / "says.py"
    script.write_text(SAYS_ITS_ENV)
    spec = make_spec(
        backend="local",
        nodes=1,
        nproc_per_node=1,
        script=str(script),
        launcher=f"{sys.executable} {script}",  # no torchrun: it says its environment, ends
        workdir=str(tmp_path),
    )
    console = Console()
    texts: list[str] = []

    def lines(block: LineBlock) -> None:
        texts.extend(text for batch in block.batches for text, _, _ in batch.lines)

    session = SessionProcess(spec, console.emit, lines)
    await session.serve()

    assert session.process is spare.process  # the spare ran it
    assert "DDPTUI_TEST_LATE=set-after-the-spare" in texts
    assert session.run.path.parent == tmp_path / "state" / "runs"
    assert (session.run.path / "session.log").is_file()
    assert oct((session.run.path / "session.log").stat().st_mode & 0o777) == "0o600"


async def test_the_speed_requests_reach_the_sessions_straggler_watch(tmp_path: Path) -> None:
    """`speed.threshold_up` and `speed.pause` travel as PauseSpeed / SetThreshold frames; the
    session moves its watch's threshold (kept in range, said in a notice) and pauses it."""
    console = Console()
    notices: list[str] = []
    told = threading.Event()

    def emit(event: Event) -> None:
        console.emit(event)
        if event.kind == "notice":
            notices.append(event.message)  # type: ignore[attr-defined]
            if "straggler threshold" in notices[-1]:
                told.set()

    spec = flood_spec(tmp_path, 2, 1_000_000, rate=200)
    session = SessionProcess(spec, emit, console.lines)
    runner = asyncio.ensure_future(session.serve())
    assert await asyncio.to_thread(console.first.wait, 120)
    session.set_speed(threshold=0.99)
    session.set_speed(paused=True)
    assert await asyncio.to_thread(told.wait, 30)
    session.request_teardown()
    summary = await runner
    assert "straggler threshold 0.95" in notices
    assert summary.stopped_by == "operator" and summary.straggler is None
