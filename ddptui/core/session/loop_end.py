"""Provides run_to_end: a session's event loop run to its end, the tasks it leaves bounded in time.

`asyncio.run` cancels the tasks still pending when its coroutine returns and waits for every
one of them, however long: a task that does not end on cancellation (a node's stack request
whose process is still being collected, a stream's close) would keep the process running after
the run's summary was said and written: a headless run that never exits, a session process
with nobody to talk to. Here they get SETTLE_S to finish as cancelled tasks do (their pipes
closed while the loop is open); if one is still pending then, it is named with its stack on
stderr and the process exits with the run's code, its output flushed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from typing import Any

SETTLE_S = 2.0  # the tasks a session left: time to end once cancelled


def run_to_end(main: Coroutine[Any, Any, int], settle_s: float = SETTLE_S) -> int:
    """Run `main` on a new event loop; its code, once what it left has ended or been named."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    code = loop.run_until_complete(main)
    rest = asyncio.all_tasks(loop)
    for task in rest:
        task.cancel()
    if rest:
        _, pending = loop.run_until_complete(asyncio.wait(rest, timeout=settle_s))
        if pending:
            for task in pending:
                print(f"ddptui: a task did not end when cancelled: {task!r}", file=sys.stderr)
                task.print_stack(file=sys.stderr)
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(code)
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    asyncio.set_event_loop(None)
    loop.close()
    return code
