"""Provides SessionThread: a Session run on an event loop of its own, in a thread of its own.

Why: under a log flood the session's ingest (pipes, framing, rank attribution) keeps its event
loop busy all the time. On the console's loop every key press then waits behind that work,
for every hop its message takes; on a loop of its own the ingest and the console take turns
at the interpreter (`sys.getswitchinterval()` apart at most), so a key is handled in
milliseconds while the ingest goes on. Nothing is lost by the move: the session still reads
every node's output and writes every line to the run directory; what the console shows of it
comes through the emit callback, called in this thread (the console's relay is thread-safe).
Back-pressure stays where it was: a session that reads slower than the nodes write leaves the
rest in the node's log file and its pipe, and reads it when it catches up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

SETTLE_S = 2.0
# While the session's thread runs, the interpreter hands over between threads this often at
# most (Python's default: 5 ms). The awaiting loop (the console's) takes the interpreter back
# after each wait for input: every turn of that loop can wait this long for it.
SWITCH_INTERVAL_S = 0.001
# While it runs, the collector looks at new objects after this many allocations (Python's
# default: 700). Ingest makes a tuple per line, each tracked until a collection has looked at
# it: at the default, a flood set off thousands of young collections and some 30 full ones
# (0.3 s each, in whichever thread allocated) per 1.6M lines, most of the console's CPU time.
GC_YOUNG_THRESHOLD = 20_000

if TYPE_CHECKING:
    from ddptui.core.events import RunSummary
    from ddptui.core.session import Session


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


class SessionThread:
    """Runs `session.run_job()` on a new event loop in a new thread; awaitable from another.

    Ask the session through this (teardown, detach, stacks) from any other thread: the
    request runs on the session's loop. Its events arrive through its emit callback, in the
    session's thread.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        # A factory, so that the runner sets no thread's event loop (it is made here, in
        # the caller's thread, and runs in the session's).
        self._runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
        self.loop = self._runner.get_loop()  # made now: requests can be queued before it runs
        self._task: asyncio.Task[object] | None = None
        self.thread = threading.Thread(
            target=self._main, name=f"session {session.run_id}", daemon=False
        )
        self._done: concurrent.futures.Future[RunSummary] = concurrent.futures.Future()

    async def run(self) -> RunSummary:
        """The session's summary, once its thread has finished the run (and its teardown).

        Cancelled, it cancels the session (whose teardown still runs, in its thread: the
        thread is not a daemon, so the interpreter waits for it before exiting).
        """
        switch, thresholds = sys.getswitchinterval(), gc.get_threshold()
        sys.setswitchinterval(min(switch, SWITCH_INTERVAL_S))
        gc.set_threshold(max(thresholds[0], GC_YOUNG_THRESHOLD), *thresholds[1:])
        self.thread.start()
        try:
            return await asyncio.shield(asyncio.wrap_future(self._done))
        except asyncio.CancelledError:
            call_on_loop(self.loop, self._cancel)
            raise
        finally:
            sys.setswitchinterval(switch)
            gc.set_threshold(*thresholds)

    def request_teardown(self) -> None:
        call_on_loop(self.loop, self.session.request_teardown)

    def request_detach(self) -> None:
        call_on_loop(self.loop, self.session.request_detach)

    def request_stacks(self) -> None:
        call_on_loop(self.loop, self.session.request_stacks)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run_job(self) -> RunSummary:
        self._task = asyncio.current_task()
        return await self.session.run_job()

    def _main(self) -> None:
        try:
            with self._runner:
                try:
                    result = self._runner.run(self._run_job())
                finally:
                    self._runner.run(_settle())
        except asyncio.CancelledError:
            self._done.cancel()
        except BaseException as exc:
            self._done.set_exception(exc)
        else:
            self._done.set_result(result)


async def _settle() -> None:
    """Let the tasks the session left (its followers, cancelled at a detach) finish while
    its loop is open: they close their processes' pipes, which need the loop to do so."""
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if rest:
        await asyncio.wait(rest, timeout=SETTLE_S)
    await asyncio.sleep(0)
