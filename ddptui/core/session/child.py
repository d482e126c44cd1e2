"""The session's own process: `python -m ddptui.core.session.child IN OUT`, as SessionProcess
starts it (IN and OUT are the inherited ends of its two pipes).

It reads one start frame (the job, its run directory, whether it attaches), runs the Session
to its end, and passes what the session emits back as frames (ddptui.core.session.wire): the
events in order, the nodes' lines as blocks of at most what a screen can show, the plan once
it is known. Requests come the other way (teardown, detach, stacks, a rank's step rate). When
the console goes away mid-run (its pipe closes), the session detaches: the job runs on, and
`ddptui attach` follows it again, as after a console killed outright.

Why a process: under a log flood, the session's ingest keeps a core busy. In the console's
process it would share one interpreter with the screen, and every key would wait its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ddptui.core.events import Event, NodeLines
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.run_dir import RunDir, open_private
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.line_window import LineWindow
from ddptui.core.session.loop_end import run_to_end
from ddptui.core.session.process import GC_YOUNG_THRESHOLD
from ddptui.core.session.session import Session
from ddptui.core.session.wire import (
    ActOnNode,
    AskRate,
    Cancel,
    Detach,
    Done,
    Drill,
    Failed,
    FrameReader,
    Item,
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

# The lines the console gets: what a screen can show (15 frames a second of 40-odd rows),
# far beyond reading. A sustained flood gets LINES_PER_S; a burst after a quieter spell up to
# BURST_LINES at once (a 1,024-rank job printing its epoch line together comes whole). The
# rest is counted as skipped; the run directory has every line.
LINES_PER_S = 10_000
BURST_LINES = 8_000
FLUSH_S = 1 / 20
SETTLE_S = 2.0


class Outbox:
    """What the session emits, written to the console by a thread of its own, so that a
    console slow to read never holds up the ingest: events wait in order; of the lines, a
    block carries what the budget allows (`rate` a second, saved up to `burst`), the newest,
    and the older ones are left out (counted per node).
    """

    def __init__(self, fd: int, rate: float, burst: int, gone: Callable[[], None]) -> None:
        self.fd, self.rate, self.burst, self._gone = fd, rate, burst, gone
        self._budget, self._budget_at = float(burst), time.monotonic()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._items: list[Item] = []
        self._window = LineWindow()
        self._seen = 0
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="session outbox", daemon=True)
        self._thread.start()

    def emit(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, NodeLines):
                self._seen += len(event.lines)
                self._window.append(event, self.burst)
                return
            self._items.append(event)
        self._wake.set()

    def send(self, item: Item) -> None:
        """A frame of its own kind (the plan, a reply, the end), in order with the events."""
        with self._lock:
            self._items.append(item)
        self._wake.set()

    def close(self, timeout: float = 10.0) -> None:
        """Write what is left, then stop."""
        with self._lock:
            self._closing = True
        self._wake.set()
        self._thread.join(timeout)

    def _take(self) -> tuple[list[Item], LineBlock | None, bool]:
        now = time.monotonic()
        budget = min(self.burst, self._budget + (now - self._budget_at) * self.rate)
        keep = int(budget)
        with self._lock:
            self._wake.clear()
            items, self._items = self._items, []
            held = self._window.count
            batches, dropped = self._window.take(keep)
            seen, closing = self._seen, self._closing
        self._budget, self._budget_at = budget - min(held, keep), now
        block = LineBlock(batches, dropped, seen) if batches or dropped else None
        return items, block, closing

    def _run(self) -> None:
        while True:
            self._wake.wait(FLUSH_S)
            items, block, closing = self._take()
            if items or block:
                try:
                    write_frame(self.fd, Out(block, tuple(items)))
                except OSError:
                    self._gone()
                    return
            if closing:
                return


def main(argv: list[str] | None = None) -> int:
    fd_in, fd_out = (int(a) for a in (argv or sys.argv[1:])[:2])
    frames = iter(FrameReader(fd_in))
    start = next(frames, None)
    if start is None:  # the console closed before it had a run for this process
        return 0
    if not isinstance(start, Start):
        raise SystemExit(f"the session's first frame is not a Start: {start!r}")
    _adopt(start.environ, start.cwd, Path(start.run_path) / "session.log")
    _yield_to_the_screen()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    run = RunDir(Path(start.run_path))
    # a task that does not end when cancelled once the run is over cannot keep this process
    # alive with nobody to talk to: its stack goes to the run's session.log
    return run_to_end(_serve(start.spec, run, start.attaching, frames, fd_out), SETTLE_S)


AUTOGROUP_NICE = 5


def _yield_to_the_screen() -> None:
    """Weigh this process's scheduling group below the console's: as a session of its own it
    has a group (Linux's autogroup) of the console's weight, and in a flood's first seconds
    both want a whole core. At nice 5 the group gets a third of the console's share when they
    meet on one core, so keys are drawn first; the ingest catches up from the nodes' log files
    (nothing is lost). Nothing changes where autogroups are off."""
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text(str(AUTOGROUP_NICE))


def _adopt(environ: dict[str, str], cwd: str, log: Path) -> None:
    """Take the console's environment and directory as they are at the launch (a spare
    started earlier), and write this process's own output into the run's session.log."""
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    with open_private(log, "ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)


async def _serve(
    spec: JobSpec, run: RunDir, attaching: bool, frames: Iterator[Any], fd_out: int
) -> int:
    loop = asyncio.get_running_loop()
    state: dict[str, object] = {"plan": None, "cancelled": False}
    session: Session | None = None

    def soon(call: Callable[[], object]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: the run is over
            loop.call_soon_threadsafe(call)

    def console_gone() -> None:
        job = state.get("job")
        running = isinstance(job, asyncio.Future) and not job.done()
        if session is not None and running and not state["cancelled"]:
            session.request_detach()

    outbox = Outbox(fd_out, LINES_PER_S, BURST_LINES, lambda: soon(console_gone))

    def emit(event: Event) -> None:
        plan = session.plan if session is not None else None
        if plan is not None and plan is not state["plan"]:
            state["plan"] = plan
            outbox.send(PlanKnown(plan))
        outbox.emit(event)

    try:
        session = Session(spec, emit, run=run, attaching=attaching)
    except Exception as exc:
        outbox.send(Failed(f"the session could not start: {exc}"))
        outbox.close()
        return 1
    job = asyncio.ensure_future(session.run_job())
    state["job"] = job

    def handle(request: Request) -> None:
        assert session is not None
        match request:
            case Teardown():
                session.request_teardown()
            case Detach():
                session.request_detach()
            case TakeStacks():
                session.request_stacks()
            case ActOnNode(action):
                session.request_node_action(action)
            case Drill():
                session.request_drill()
            case AskRate(node, local_rank):
                monitor = session.monitor
                rate = monitor.step_rate(node, local_rank) if monitor else None
                outbox.send(RateTold(node, local_rank, rate))
            case PauseSpeed(paused):
                session.set_speed(paused=paused)
            case SetThreshold(threshold):
                session.set_speed(threshold=threshold)
            case Cancel():
                state["cancelled"] = True
                job.cancel()

    def read_requests() -> None:
        for item in frames:
            soon(functools.partial(handle, item))
        soon(console_gone)

    threading.Thread(target=read_requests, name="session requests", daemon=True).start()
    code = 0
    try:
        summary: RunSummary = await job
    except asyncio.CancelledError:
        outbox.send(Failed("the session was cancelled"))
        code = 1
    except BaseException:  # noqa: BLE001 - the console shows why its session stopped
        outbox.send(Failed(traceback.format_exc()))
        code = 1
    else:
        outbox.send(Done(summary))
    await _settle()
    outbox.close()
    return code


async def _settle() -> None:
    """Let the tasks the session left (its followers, cancelled at a detach) finish while
    its loop is open: they close their processes' pipes, which need the loop to do so."""
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if rest:
        await asyncio.wait(rest, timeout=SETTLE_S)
    await asyncio.sleep(0)


if __name__ == "__main__":
    sys.exit(main())
