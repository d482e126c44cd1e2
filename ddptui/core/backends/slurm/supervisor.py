"""Provides StepSupervisor: the one step's supervisor (the job helper's `launch` on the
console's host), started while Slurm grants the allocation and told its job at launch.

Why: between the grant and srun's start, the supervisor's Python starting and compiling the
job helper (75 KB) took 0.05-0.15 s of the launch at 64 nodes on a shared host; started
ahead, it does that while salloc and the questions after the grant are answered, and waits
at its JOB line for the job (node.AHEAD_PROGRAM).
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from ddptui.core.backends.transport import ChunkSink, CommandResult, TransportError
from ddptui.core.node import AHEAD_PROGRAM, job_ahead_source


class StepSupervisor:
    """A job helper waiting for its job; `run` tells it and follows it as
    LocalTransport.stream would (its start report, then its output), `close` stops one
    never told."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._used = False

    @classmethod
    async def start(cls, python: str, source: bytes, verb: str) -> StepSupervisor:
        program = job_ahead_source(source)
        try:
            proc = await asyncio.create_subprocess_exec(
                *(python, "-S", "-c", AHEAD_PROGRAM, str(len(program)), verb),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=os.environ.copy(),
            )
        except OSError as exc:
            raise TransportError(f"cannot run {python}: {exc.strerror}") from None
        assert proc.stdin is not None
        proc.stdin.write(program)  # the pipe takes the rest as the helper reads it
        return cls(proc)

    async def run(self, job: bytes, on_stdout: ChunkSink) -> CommandResult:
        """Send the job (node.job_text) and hand the helper's stdout to `on_stdout` until it
        ends; cancelling stops it."""
        proc, self._used = self._proc, True
        assert proc.stdin and proc.stdout and proc.stderr
        err_task = asyncio.ensure_future(proc.stderr.read())
        try:
            proc.stdin.write(job)
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            proc.stdin.close()
            while chunk := await proc.stdout.read(1 << 16):
                on_stdout(chunk)
            err = await err_task
            await proc.wait()
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            err_task.cancel()
        return CommandResult(proc.returncode, "", err.decode(errors="replace"))

    async def close(self) -> None:
        """Stop a supervisor never told its job (it has started nothing)."""
        if self._used:
            return
        self._used = True
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        await self._proc.wait()
