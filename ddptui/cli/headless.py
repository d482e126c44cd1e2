"""Provides headless mode: the same Session as the console, its events as JSON lines."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TextIO

from ddptui.cli.gc_policy import end_startup
from ddptui.core.diagnose.speed import SpeedRound
from ddptui.core.events import Event, NodeLines
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.session.session import Session


def run_headless(
    spec: JobSpec,
    *,
    lines: bool = False,
    out: TextIO = sys.stdout,
    attach: RunDir | None = None,
    detach: bool = False,
) -> int:
    """Run the job to the end; exit 0 only if every rank exited 0 and every node is clean.

    With `detach`, return once every node is launched and leave the job running (exit 0 if
    it launched); SIGUSR1 detaches at any time. `ddptui attach RUN_ID` follows it later.
    """

    def emit(event: Event) -> None:
        if isinstance(event, SpeedRound):
            return  # the speed view's, every round: the straggler events say what changed
        if not isinstance(event, NodeLines):
            out.write(event.to_json() + "\n")
        elif lines:  # one JSON line per output line, as `line` events
            out.write("".join(line.to_json() + "\n" for line in event.each()))
        else:
            return
        out.flush()

    async def main() -> int:
        session = Session(spec, emit, run=attach, detach_after_launch=detach)
        end_startup()  # the backend and its engine are imported by now
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, session.request_teardown)
        loop.add_signal_handler(signal.SIGUSR1, session.request_detach)
        summary = await session.run_job()
        if summary.detached:
            return 0 if summary.detail.startswith("detached") else 1
        return 0 if summary.ok else 1

    return asyncio.run(main())
