"""Provides StepSupervisor: the one step's supervisor (the job helper's `launch` on the
console's host), started before the job is known and told its job at launch.

Why: between the grant and srun's start, the supervisor's Python starting and compiling the
job helper (75 KB) took 0.05-0.25 s of the launch at 64 nodes on a shared host; started
ahead (by `ddptui run --headless` with the early salloc, else when the backend allocates), it
does that while Slurm grants the allocation, and waits at its JOB line for the job
(node.AHEAD_PROGRAM). Its pipes are read by threads, so it may start before the console's
event loop exists.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading

from ddptui.core.backends.transport import ChunkSink, CommandResult, TransportError
from ddptui.core.node import AHEAD_PROGRAM, job_ahead_source

READ_SIZE = 1 << 16


class StepSupervisor:
    """A job helper waiting for its job; `run` tells it and follows it as
    LocalTransport.stream would (its start report, then its output), `close` stops one
    never told."""

    def __init__(self, python: str, source: bytes, verb: str) -> None:
        self.started_as = (python, source, verb)
        program = job_ahead_source(source)
        try:
            self._proc = subprocess.Popen(
                [python, "-S", "-c", AHEAD_PROGRAM, str(len(program)), verb],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise TransportError(f"cannot run {python}: {exc.strerror}") from None
        self._used = False
        # the program to its stdin meanwhile (more than a pipe holds)
        self._sending = threading.Thread(target=self._send, args=(program,), daemon=True)
        self._sending.start()

    def _send(self, data: bytes, close: bool = False) -> None:
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):  # it ended early: its stderr says why
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
            if close:
                self._proc.stdin.close()

    def _told(self, job: bytes) -> None:
        self._sending.join()
        self._send(job, close=True)

    async def run(self, job: bytes, on_stdout: ChunkSink) -> CommandResult:
        """Send the job (node.job_text) and hand the helper's stdout to `on_stdout` until it
        ends; cancelling stops it."""
        proc, self._used = self._proc, True
        assert proc.stdout is not None and proc.stderr is not None
        err_read = asyncio.ensure_future(asyncio.to_thread(proc.stderr.read))
        try:
            await asyncio.to_thread(self._told, job)
            out = proc.stdout.fileno()
            while chunk := await asyncio.to_thread(os.read, out, READ_SIZE):
                on_stdout(chunk)
            err = await err_read
            code = await asyncio.to_thread(proc.wait)
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.to_thread(proc.wait)
            err_read.cancel()
        return CommandResult(code, "", err.decode(errors="replace"))

    def close(self) -> None:
        """Stop a supervisor never told its job (it has started nothing)."""
        if self._used:
            return
        self._used = True
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


_ahead: StepSupervisor | None = None


def start_ahead(python: str, source: bytes, verb: str) -> None:
    """Start the step's supervisor now, for the backend to take (`take`)."""
    global _ahead
    discard()
    with contextlib.suppress(TransportError):
        _ahead = StepSupervisor(python, source, verb)


def take(python: str, source: bytes, verb: str) -> StepSupervisor:
    """The supervisor started ahead if it runs exactly this, else one started now."""
    global _ahead
    ahead, _ahead = _ahead, None
    if ahead is not None and ahead.started_as == (python, source, verb):
        return ahead
    if ahead is not None:
        ahead.close()
    return StepSupervisor(python, source, verb)


def discard() -> None:
    """Stop a supervisor started ahead that nobody took."""
    global _ahead
    ahead, _ahead = _ahead, None
    if ahead is not None:
        ahead.close()
