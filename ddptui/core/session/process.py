"""Provides SessionProcess: the console's handle on a Session run in a process of its own.

Why: under a log flood the session's ingest (pipes, framing, rank attribution) keeps a core
busy. Sharing the console's interpreter, it took turns with the screen, and every key press
waited behind it; in a process of its own it runs on the other core, in a scheduling group
of its own (a session of its own), and the console keeps the screen. What the console needs
of the session comes back over a pipe (ddptui.core.session.wire): the events in order, the
nodes' lines as blocks of at most what the screen shows (every line is still written to the
run directory, by the session process), the plan once known, a rank's step rate on request.

The run directory is made here, before the process starts, so that the console knows the
run's id at once; the process writes the run's records into it, and its own output (what a
crash prints) into `session.log` there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ddptui.core.events import Event, TeardownReport
from ddptui.core.runs.run_dir import RunDir, new_run_id
from ddptui.core.session.membership import NodeAction
from ddptui.core.session.wire import (
    ActOnNode,
    AskRate,
    Cancel,
    Detach,
    Done,
    Drill,
    Failed,
    FrameReader,
    LineBlock,
    Out,
    PauseSpeed,
    PlanKnown,
    RateTold,
    Request,
    SetThreshold,
    Start,
    TakeStacks,
    Teardown,
    write_frame,
)

if TYPE_CHECKING:
    from ddptui.core.job.plan import LaunchPlan
    from ddptui.core.job.spec import JobSpec
    from ddptui.core.runs.summary import RunSummary

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the tree this console runs from
# The session's process raises its collector's young threshold to this (Python's default:
# 700). It makes a tuple per line it ingests: at the default a flood set off thousands of
# young collections and dozens of full ones per million lines.
GC_YOUNG_THRESHOLD = 20_000
# The console's own thresholds, young and middle, while the app runs. Its screen keeps every
# view's newest lines and Textual's strips: under a flood some 40,000 objects outlive a young
# collection every few seconds, and a middle collection (Python's default: every 10 young
# ones) looks at all of them. At 20,000 and 10, a middle collection stopped the screen for
# 20-55 ms every 1.5-2 s and a young one for up to 30 ms (a quiet 16-core host), which set
# the keys' worst latencies. At 5,000 and 400 a young collection takes 3-5 ms and a middle
# one comes after as many allocations as a full one did before (every 15-20 s of a flood);
# cycles among young objects are still collected young.
GC_CONSOLE_THRESHOLDS = (5_000, 400)
CHILD = "ddptui.core.session.child"


class SessionProcessError(RuntimeError):
    """The session's process stopped without a summary (a crash, a kill, a bad start)."""


def call_on_loop(loop: asyncio.AbstractEventLoop | None, call: Callable[[], object]) -> None:
    """Run `call` on `loop`: now when it is the running loop (or there is none, or it has
    closed: nothing waits there any more), else as soon as that loop, in its thread, can."""
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    if loop is None or loop is here or loop.is_closed():
        call()
        return
    with contextlib.suppress(RuntimeError):  # closed meanwhile: the session is over
        loop.call_soon_threadsafe(call)


class _Started:
    """A session process and this end of its two pipes; before its start frame it waits,
    its imports done (a spare), and exits when the console closes its pipe unused."""

    def __init__(self) -> None:
        to_child, self.to_child = os.pipe()
        self.from_child, from_child = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", CHILD, str(to_child), str(from_child)],
            pass_fds=(to_child, from_child),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # until its start frame names the run's session.log
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # no terminal signals, and a scheduling group its own
        )
        os.close(to_child)
        os.close(from_child)

    def close(self) -> None:
        for fd in (self.to_child, self.from_child):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.process.wait()


_spare: _Started | None = None
_spare_lock = threading.Lock()


def prepare_spare() -> None:
    """Start a session process ahead of the next run, so that a launch does not wait for
    its interpreter and imports (a second or more on a busy head node)."""
    global _spare
    with _spare_lock:
        if _spare is None or _spare.process.poll() is not None:
            _spare = _Started()


def _take_spare() -> _Started | None:
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is not None and spare.process.poll() is not None:
        spare.close()
        return None
    return spare


class SessionProcess:
    """One run's session in a child process; its events reach `emit` and its lines reach
    `lines`, both called in a reader thread of this process (they must be thread-safe).

    Ask it through this (teardown, detach, stacks) from any thread; `serve()` awaits the
    run's summary.
    """

    def __init__(
        self,
        spec: JobSpec,
        emit: Callable[[Event], None],
        lines: Callable[[LineBlock], None],
        run: RunDir | None = None,
    ) -> None:
        self.spec = spec
        self.attaching = run is not None
        self.read_only = False
        self.run = run or RunDir.create(new_run_id())
        self.plan: LaunchPlan | None = None
        self.teardown_reports: dict[str, TeardownReport] = {}
        self._emit, self._lines = emit, lines
        self._rates: dict[tuple[str, int], float | None] = {}
        self._to_child: int | None = None
        self._send_lock = threading.Lock()
        self._done: concurrent.futures.Future[RunSummary] = concurrent.futures.Future()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def log_path(self) -> Path:
        return self.run.path / "session.log"

    async def serve(self) -> RunSummary:
        """Start the session's process; its summary once it has finished the run.

        Cancelled, it asks the session to cancel (its teardown still runs, in its process).
        """
        self._spawn()
        try:
            return await asyncio.shield(asyncio.wrap_future(self._done))
        except asyncio.CancelledError:
            self._send(Cancel())
            raise

    def request_teardown(self) -> None:
        self._send(Teardown())

    def request_detach(self) -> None:
        self._send(Detach())

    def request_stacks(self) -> None:
        self._send(TakeStacks())

    def set_speed(self, paused: bool | None = None, threshold: float | None = None) -> None:
        """Pause or resume the straggler watch, or move its threshold (as Session.set_speed)."""
        if paused is not None:
            self._send(PauseSpeed(paused))
        if threshold is not None:
            self._send(SetThreshold(threshold))

    def request_node_action(self, action: NodeAction) -> None:
        """Kill or drain a node, or kill one rank (the operator confirmed it)."""
        self._send(ActOnNode(action))

    def request_drill(self) -> None:
        """A preemption drill of the whole job (the operator confirmed it)."""
        self._send(Drill())

    def step_rate(self, node: str, local_rank: int) -> float | None:
        """The rank's step rate as the session last told it (asks again for the next call)."""
        self._send(AskRate(node, local_rank))
        return self._rates.get((node, local_rank))

    # -- the process ----------------------------------------------------------------------

    def _spawn(self) -> None:
        """Hand the run to the spare session process (else a new one): the job, its run
        directory, and this console's environment and directory as they are now."""
        start = Start(self.spec, str(self.run.path), self.attaching, dict(os.environ), os.getcwd())
        for make in (_take_spare, _Started):
            started = make()
            if started is None:
                continue
            try:
                write_frame(started.to_child, start)
            except OSError:  # it died meanwhile
                started.close()
                continue
            break
        else:
            raise SessionProcessError("the session's process could not be started")
        self.process, self._to_child = started.process, started.to_child
        reader = threading.Thread(
            target=self._read,
            args=(started.from_child,),
            name=f"session {self.run_id}",
            daemon=True,
        )
        reader.start()

    def _send(self, item: Request) -> None:
        with self._send_lock:
            if self._to_child is None:
                return
            with contextlib.suppress(OSError):  # the process has ended: nothing to ask
                write_frame(self._to_child, item)

    def _read(self, fd: int) -> None:
        try:
            for frame in FrameReader(fd):
                self._take(frame)
        finally:
            os.close(fd)
            with self._send_lock:
                if self._to_child is not None:
                    os.close(self._to_child)
                    self._to_child = None
            code = self.process.wait() if self.process is not None else None
            if not self._done.done():
                self._done.set_exception(
                    SessionProcessError(
                        f"the session's process ended (exit code {code}) without a summary; "
                        f"its output is in {self.log_path}"
                    )
                )

    def _take(self, frame: Out) -> None:
        if frame.block is not None:
            self._lines(frame.block)
        for item in frame.items:
            match item:
                case PlanKnown(plan):
                    self.plan = plan
                case RateTold(node, local_rank, rate):
                    self._rates[(node, local_rank)] = rate
                case Done(summary):
                    if not self._done.done():
                        self._done.set_result(summary)
                case Failed(why):
                    if not self._done.done():
                        self._done.set_exception(SessionProcessError(why))
                case TeardownReport():
                    self.teardown_reports[item.node] = item
                    self._emit(item)
                case _:
                    self._emit(item)
