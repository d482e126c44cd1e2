"""Provides Transport, the small interface a node is reached through, and its local form."""

from __future__ import annotations

import asyncio
import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass


class TransportError(RuntimeError):
    """A node could not be reached or the command could not be run; the message says why."""


class TransportTimeout(TransportError):
    """The command did not end within its time (the connection may be sound: the node slow)."""


@dataclass(frozen=True)
class CommandResult:
    exit_code: int | None
    stdout: str
    stderr: str


ChunkSink = Callable[[bytes], None]


class Transport(ABC):
    """Runs argv on one node. Implementations: this machine, asyncssh, paramiko."""

    host: str

    async def connect(self) -> None:
        """Open what later commands need; raises TransportError with a message for the operator."""

    async def close(self) -> None:
        """Release the connection; running remote commands are not signalled."""

    @abstractmethod
    async def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        """Run argv to completion and collect its output."""

    @abstractmethod
    async def stream(
        self, argv: Sequence[str], on_stdout: ChunkSink, stdin: bytes | None = None
    ) -> CommandResult:
        """Run argv, handing stdout to `on_stdout` as it arrives; cancelling stops the command."""


class LocalTransport(Transport):
    """The nodes of the local backend are processes on this machine."""

    def __init__(self, host: str = "localhost") -> None:
        self.host = host

    async def _spawn(self, argv: Sequence[str]) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=os.environ.copy(),
            )
        except OSError as exc:
            raise TransportError(f"cannot run {argv[0]}: {exc.strerror}") from None

    async def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        proc = await self._spawn(argv)
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise TransportError(f"{argv[0]} timed out after {timeout} s") from None
        return CommandResult(
            proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        )

    async def stream(
        self, argv: Sequence[str], on_stdout: ChunkSink, stdin: bytes | None = None
    ) -> CommandResult:
        proc = await self._spawn(argv)
        assert proc.stdin and proc.stdout and proc.stderr
        if stdin is not None:
            proc.stdin.write(stdin)
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
        proc.stdin.close()
        err_task = asyncio.ensure_future(proc.stderr.read())
        try:
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
