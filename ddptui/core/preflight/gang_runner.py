"""Provides the gang test's runner: preflight's all-reduce test as a Session of its own.

Preflight stands above the session, so the gang test is a job like any other: the command line
and the console hand this runner to the checks (their tests pass others). It runs through the
job's own backend, with a run directory and a line in the history like any other job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ddptui.core.events import Event, NodeLines, Notice
from ddptui.core.job.spec import JobSpec
from ddptui.core.preflight.gang import GANG_TIMEOUT_S, GangRun, parse_line
from ddptui.core.session.session import Session


async def run_gang(
    spec: JobSpec, notify: Callable[[Event], None] | None = None, timeout: float = GANG_TIMEOUT_S
) -> GangRun:
    """Run the gang test to its end (torn down after `timeout` s) and read each node's line."""
    result = GangRun()

    def emit(event: Event) -> None:
        if isinstance(event, NodeLines):
            for text, _rank, _local_rank in event.lines:
                node = parse_line(text)
                if node is not None:
                    result.nodes[event.node] = node

    session = Session(spec, emit)
    result.run_id = session.run_id
    say = notify or (lambda event: None)
    say(Notice("info", f"gang test: run {session.run_id}, {spec.nodes} x {spec.nproc_per_node}"))
    task = asyncio.ensure_future(session.run_job())
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        session.request_teardown()
    summary = await task
    if not done:
        result.error = f"no result in {timeout:g} s (torn down)"
    elif not summary.ok:
        result.error = summary.detail or "a rank failed"
    say(Notice("info", f"gang test: {'ok' if not result.error else result.error}"))
    return result
