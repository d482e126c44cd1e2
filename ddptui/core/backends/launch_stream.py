"""Provides LaunchStream: a node's start and its output from the first byte, on one command.

Why: the node helper's `launch` starts the job and then tails its log in the same remote
process, so a node costs one remote process and one SSH channel instead of two (`start`, then
`tail`): at hundreds of hosts those process starts are most of the launch. Its stdout is the
start report on one line, then the raw log. The output that arrives before the session
follows the node is kept, and handed over first, in order, when it does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from ddptui.core.backends.transport import ChunkSink, CommandResult, TransportError

StreamCommand = Callable[[ChunkSink], Awaitable[CommandResult]]


class LaunchStream:
    """One node's `launch` command: its start report, then its log, to whoever follows."""

    def __init__(self, run: StreamCommand) -> None:
        self._head = b""
        self.report: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending: list[bytes] = []
        self._sink: ChunkSink | None = None
        self.task: asyncio.Future[CommandResult] = asyncio.ensure_future(run(self._on_chunk))
        self.task.add_done_callback(self._ended)

    def _on_chunk(self, chunk: bytes) -> None:
        if not self.report.done():
            self._head += chunk
            line, newline, rest = self._head.partition(b"\n")
            if not newline:
                return
            self.report.set_result(line.decode(errors="replace").strip())
            chunk = rest
            if not chunk:
                return
        if self._sink is None:
            self._pending.append(chunk)
        else:
            self._sink(chunk)

    def _ended(self, task: asyncio.Future[CommandResult]) -> None:
        if self.report.done():
            return
        if task.cancelled():
            self.report.cancel()
        elif task.exception() is not None:
            self.report.set_exception(task.exception())  # type: ignore[arg-type]
        else:
            result = task.result()
            reason = self._head.decode(errors="replace").strip() or result.stderr.strip()
            self.report.set_result(reason or f"exit {result.exit_code}")

    async def started(self) -> str:
        """The start report: a JSON object when the job runs, else why it did not start.

        Raises TransportError when the command could not be run at all.
        """
        return await self.report

    async def follow(self, on_chunk: ChunkSink) -> CommandResult:
        """Everything after the report, from the first byte, then live until the command ends."""
        for chunk in self._pending:
            on_chunk(chunk)
        self._pending.clear()
        self._sink = on_chunk
        return await self.task

    async def close(self) -> None:
        """Stop the command and wait until it is gone (the job itself keeps running: it was
        started detached). A command that already ended is only collected."""
        if not self.task.done():
            self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TransportError):
            await self.task
        if self.report.done() and not self.report.cancelled():
            self.report.exception()  # retrieved: no "never retrieved" warning
