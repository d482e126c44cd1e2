"""Provides the frames the console and its session process pass each other over a pipe.

A frame is a 4-byte big-endian length, then that many bytes of a pickle. Both ends are this
package at the same version (the console starts the session process from its own tree), and
the pipes are the two processes' own (inherited descriptors, never a path another user
could open), so pickle's trust in its input is the pipes' trust in each other.
"""

from __future__ import annotations

import os
import pickle
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ddptui.core.events import NodeLines

_LENGTH = struct.Struct(">I")
_READ = 1 << 16


@dataclass
class LineBlock:
    """The nodes' lines the session process hands the console since its last block.

    `batches` keep each node's order; `dropped` counts, per node, the lines left out of this
    block because the console had not taken the last ones yet (the screen shows a window of
    each log, the run directory keeps every line); `seen` is every line the session has
    ingested so far, shown or not.
    """

    batches: list[NodeLines] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    seen: int = 0


def write_frame(fd: int, item: object) -> None:
    """Write one frame whole (blocking); BrokenPipeError when the other end is gone."""
    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


class FrameReader:
    """The frames from a blocking descriptor, one at a time, until its writer closes it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def __iter__(self) -> Iterator[Any]:
        while True:
            head = self._take(_LENGTH.size)
            if head is None:
                return
            (size,) = _LENGTH.unpack(head)
            body = self._take(size)
            if body is None:
                return
            yield pickle.loads(body)

    def _take(self, size: int) -> bytes | None:
        while len(self._buffer) < size:
            try:
                chunk = os.read(self.fd, max(_READ, size - len(self._buffer)))
            except OSError:
                chunk = b""
            if not chunk:
                return None
            self._buffer += chunk
        taken = bytes(self._buffer[:size])
        del self._buffer[:size]
        return taken
