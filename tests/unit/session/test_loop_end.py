"""A session's process ends with its run (the console's session process, a headless run): a
task that ignores its cancellation once the run is over cannot keep it alive (it would sit with
nobody to talk to); its stack goes to stderr (the run's session.log), what it printed is kept."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.cases import ROOT

PROGRAM = textwrap.dedent(
    """
    import asyncio, sys
    from ddptui.core.session.loop_end import run_to_end

    async def stubborn():
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass  # a follower that swallows its cancellation

    async def serve():
        asyncio.ensure_future(stubborn())
        polite = asyncio.ensure_future(asyncio.sleep(3600))
        await asyncio.sleep(0.1)
        print('{"event": "summary"}')  # buffered: a pipe is not a terminal
        return 3 if sys.argv[1] == "stubborn" else (polite.cancel(), 0)[1]

    sys.exit(run_to_end(serve()))
    """
)


def _run(program: str, mode: str) -> subprocess.CompletedProcess[str]:
    """The program's process, which must end by itself (a hang fails the test at 60 s)."""
    argv = [sys.executable, "-c", program, mode]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_a_task_that_ignores_its_cancellation_does_not_keep_the_process_alive() -> None:
    done = _run(PROGRAM, "stubborn")
    assert done.returncode == 3  # the run's own exit code
    assert done.stdout == '{"event": "summary"}\n'  # flushed before the process went
    assert "a task did not end when cancelled" in done.stderr
    assert "stubborn" in done.stderr  # its stack, to find it by


def test_tasks_that_end_when_cancelled_end_quietly() -> None:
    done = _run(PROGRAM.replace("asyncio.ensure_future(stubborn())", "None"), "polite")
    assert done.returncode == 0 and done.stderr == ""
