"""Provides the typed frames the console and its session process pass each other over a pipe.

Each frame is one of the frozen dataclasses below, dispatched by type at either end: the
console sends a `Start` and then requests (`Teardown`, `Detach`, `TakeStacks`, `AskRate`,
`PauseSpeed`, `SetThreshold`, `ActOnNode`, `Drill`, `Cancel`); the session process sends
`Out` frames, each with a block of the nodes' lines and, in order, the events and its own
items (`PlanKnown`, `RateTold`, `Done`, `Failed`).

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
from typing import TYPE_CHECKING, Any

from ddptui.core.events import Event, NodeLines
from ddptui.core.session.membership import NodeAction

if TYPE_CHECKING:
    from ddptui.core.job.plan import LaunchPlan
    from ddptui.core.job.spec import JobSpec
    from ddptui.core.runs.summary import RunSummary

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


# -- the console to its session -----------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """The run to serve: the job, its run directory, whether it attaches to a running job, and
    the console's environment and directory as they are at the launch."""

    spec: JobSpec
    run_path: str
    attaching: bool
    environ: dict[str, str]
    cwd: str


@dataclass(frozen=True)
class Teardown:
    """Stop every process of the job on every node, and prove it."""


@dataclass(frozen=True)
class Detach:
    """Leave the job running; the session ends, `ddptui attach` follows the job later."""


@dataclass(frozen=True)
class TakeStacks:
    """Take every rank's stacks now."""


@dataclass(frozen=True)
class AskRate:
    """A rank's step rate, told back as `RateTold`."""

    node: str
    local_rank: int


@dataclass(frozen=True)
class PauseSpeed:
    """Pause (or resume) the straggler watch's scoring rounds."""

    paused: bool


@dataclass(frozen=True)
class SetThreshold:
    """The straggler watch's threshold from now on (0..1; kept within its range)."""

    threshold: float


@dataclass(frozen=True)
class ActOnNode:
    """The operator's kill or drain of a node, or kill of one rank (confirmed already)."""

    action: NodeAction


@dataclass(frozen=True)
class Drill:
    """A preemption drill of the whole job (confirmed already): see drill.py."""


@dataclass(frozen=True)
class Cancel:
    """The console gave up on the run: cancel the session (its teardown still runs)."""


Request = (
    Teardown
    | Detach
    | TakeStacks
    | AskRate
    | PauseSpeed
    | SetThreshold
    | ActOnNode
    | Drill
    | Cancel
)


# -- the session to its console -------------------------------------------------------------


@dataclass(frozen=True)
class PlanKnown:
    """The launch plan, once it is known (and whenever it changes)."""

    plan: LaunchPlan


@dataclass(frozen=True)
class RateTold:
    """A rank's step rate as the session knows it (None: not known)."""

    node: str
    local_rank: int
    rate: float | None


@dataclass(frozen=True)
class Done:
    """The run ended: its summary."""

    summary: RunSummary


@dataclass(frozen=True)
class Failed:
    """The session itself failed (could not start, was cancelled, raised): why."""

    why: str


Item = Event | PlanKnown | RateTold | Done | Failed


@dataclass(frozen=True)
class Out:
    """What the session emitted since the last frame: the lines' block, then the rest in order."""

    block: LineBlock | None
    items: tuple[Item, ...]


def write_frame(fd: int, item: Start | Request | Out) -> None:
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
