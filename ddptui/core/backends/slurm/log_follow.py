"""Provides follow_log: stream a log file that a detached job writes, until its exit file.

The Slurm backend's jobs write straight into the run directory (`LOG`, then `LOG.exit` with
the exit code, written atomically last), so the console can die and come back without losing
a byte. Following is then reading a local file; `ended` is asked now and then whether the
writer can still finish (a batch job scancelled before it wrote LOG.exit never will).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

from ddptui.core.backends.transport import ChunkSink

POLL_S = 0.1
# Until the node's first output its log is looked at twice as often: that first line says a
# rank runs, the moment the launch is judged by (a 64-node step waited 50 ms more on average
# for its last node's line at POLL_S); once output has come, POLL_S.
FIRST_POLL_S = 0.05
CHECK_EVERY_S = 2.0
EXIT_GRACE_S = 2.0
READ_SIZE = 1 << 16

Ended = Callable[[], Awaitable[int | None]]


def exit_path(log: Path) -> Path:
    return log.with_name(log.name + ".exit")


def read_exit(path: Path) -> int:
    text = path.read_text().strip()
    try:
        return int(text)
    except ValueError:
        return 1


class _Reader:
    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self.offset = offset
        self._file: IO[bytes] | None = None

    def read(self) -> bytes:
        if self._file is None:
            if not self.path.exists():
                return b""
            self._file = self.path.open("rb")
            self._file.seek(self.offset)
        return self._file.read(READ_SIZE)

    def drain(self, on_chunk: ChunkSink) -> None:
        while chunk := self.read():
            on_chunk(chunk)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


async def follow_log(
    path: Path, offset: int, on_chunk: ChunkSink, ended: Ended | None = None
) -> int:
    """Hand the log from byte `offset` to `on_chunk` as it grows; return the exit code.

    `ended()` returns None while the writer may still finish, else the code to report if
    no exit file turns up (it is asked after CHECK_EVERY_S without new output).
    """
    done = exit_path(path)
    reader = _Reader(path, offset)
    idle = 0.0
    poll = FIRST_POLL_S
    try:
        while True:
            chunk = reader.read()
            if chunk:
                on_chunk(chunk)
                idle, poll = 0.0, POLL_S
                continue
            if done.exists():
                reader.drain(on_chunk)
                return read_exit(done)
            await asyncio.sleep(poll)
            idle += poll
            if ended is None or idle < CHECK_EVERY_S:
                continue
            idle = 0.0
            code = await ended()
            if code is None:
                continue
            waited = 0.0
            while not done.exists() and waited < EXIT_GRACE_S:
                await asyncio.sleep(POLL_S)
                waited += POLL_S
            reader.drain(on_chunk)
            return read_exit(done) if done.exists() else code
    finally:
        with contextlib.suppress(OSError):
            reader.close()
