"""Provides the node's follower of the ranks' collectives files: their new lines to the console.

Runs on the nodes inside the job helper's `tail` (sent ahead of job_helper.py), standard
library only. The workers' sampler (collective_sampler.py) appends one line a second per rank
to `<debug dir>/collectives/rank_<RANK>.jsonl` and moves a full file to `.1`; the follower
keeps each file open, so a rotated file is read to its end through the same descriptor before
the new one is opened from its start: no line is lost or read twice (a file first seen with
its `.1` already beside it has the `.1` read first). Each whole line goes out
on the helper's stdout between log chunks as `GPU_MARK {"collectives": LINE}`: the same mark
as the GPU samples, so every backend's demultiplexer takes it out of the log unchanged.
"""

from __future__ import annotations

import os

from ddptui.core.node.gpu_sampler import GPU_MARK  # sent ahead of this program

TYPE_CHECKING = False  # typing is not imported on the node: it is its largest import there
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import IO

COLLECTIVES_KEY = "collectives"
FOLLOW_EVERY_S = 1.0  # the sampler writes once a second: looking more often finds nothing
MAX_LINE = 4 << 20  # a line longer than this without its end is not one of the sampler's


class CollectiveFollower:
    """Sends the new whole lines of every `rank_*.jsonl` under `folder` through `write`."""

    every_s = FOLLOW_EVERY_S

    def __init__(self, folder: str, write: Callable[[bytes], None]) -> None:
        self.folder = folder
        self.write = write
        self._files: dict[str, IO[bytes]] = {}
        self._held: dict[str, bytes] = {}
        self.sent = 0

    @classmethod
    def beside(cls, log_path: str, write: Callable[[bytes], None]) -> CollectiveFollower:
        """The follower of the node whose log is `log_path`: its workers write their
        collectives into the debug directory beside the log (see job_helper._debug_env)."""
        return cls(os.path.join(os.path.splitext(log_path)[0] + ".debug", "collectives"), write)

    def poll(self) -> None:
        """Read what each file gained since the last poll (a missing folder: nothing yet)."""
        try:
            names = [n for n in os.listdir(self.folder) if n.endswith(".jsonl")]
        except OSError:
            return
        for name in names:
            path = os.path.join(self.folder, name)
            f = self._files.get(name)
            if f is None:
                self._rotated_before(name, path)
                f = self._open(name, path)
                if f is None:
                    continue
            self._read(name, f)
            try:
                rotated = os.stat(path).st_ino != os.fstat(f.fileno()).st_ino
            except OSError:
                continue
            if rotated:  # moved to .1: its end was read above, the new file starts now
                f.close()
                self._held.pop(name, None)
                new = self._open(name, path)
                if new is not None:
                    self._read(name, new)

    def _rotated_before(self, name: str, path: str) -> None:
        """A file first seen with its `.1` beside it (the tail started late, or reattached):
        the `.1` first, whole, so its lines come before the new file's."""
        try:
            with open(path + ".1", "rb") as old:
                self._read(name, old)
        except OSError:
            return
        self._held.pop(name, None)

    def _open(self, name: str, path: str) -> IO[bytes] | None:
        try:
            f = open(path, "rb")  # noqa: SIM115 - kept open across polls, closed in close()
        except OSError:
            return None
        self._files[name] = f
        return f

    def _read(self, name: str, f: IO[bytes]) -> None:
        data = self._held.pop(name, b"") + f.read()
        if not data:
            return
        *lines, rest = data.split(b"\n")
        if len(rest) < MAX_LINE:
            self._held[name] = rest
        out = [
            GPU_MARK + b'{"' + COLLECTIVES_KEY.encode() + b'":' + line + b"}\n"
            for line in lines
            if line.startswith(b"{")
        ]
        if out:
            self.sent += len(out)
            self.write(b"".join(out))

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
