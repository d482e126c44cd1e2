"""Provides stack reading and grouping: every rank's threads, folded into groups, the suspect named.

The node's collector (node/worker_hook.py) sends each worker's stacks as faulthandler or
py-spy printed them. Ranks whose main threads stand in the same frames form one group; the
odd group out is the suspect: the ranks not waiting in a collective while others are, else
the ranks of groups smaller than the largest. When every group waits in a collective of its
own and none is the odd one out, the groups wait on each other: a deadlock, every group named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FH_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+) in (.+)$')
_SPY_THREAD = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+) \(([^)]*)\)(?:: "([^"]*)")?')
_SPY_FRAME = re.compile(r"^\s+(.+?) \((.+):(\d+)\)$")
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")
_COLLECTIVE_FILES = ("distributed_c10d.py", "c10d_logger.py")
_HOOK_THREAD = "_dump_on_request"


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}"

    @property
    def where(self) -> str:
        return f"{PurePosixPath(self.path).name}:{self.line}"

    @property
    def library(self) -> bool:
        return any(part in self.path for part in _LIBRARY)


@dataclass(frozen=True)
class Thread:
    name: str
    frames: tuple[Frame, ...]  # innermost first


def parse_stacks(text: str) -> list[Thread]:
    """faulthandler's or py-spy's dump of one process -> its threads, innermost frame first."""
    threads: list[Thread] = []
    name, frames = "", list[Frame]()
    started = False
    for line in text.splitlines():
        head = _FH_THREAD.match(line) or _SPY_THREAD.match(line)
        if head:
            if started:
                threads.append(Thread(name, tuple(frames)))
            name, frames, started = line.split(" (")[0], [], True
            continue
        frame = _FH_FRAME.match(line)
        if frame:
            frames.append(Frame(frame.group(1), int(frame.group(2)), frame.group(3).strip()))
            continue
        spy = _SPY_FRAME.match(line)
        if spy and started:
            frames.append(Frame(spy.group(2), int(spy.group(3)), spy.group(1).strip()))
    if started:
        threads.append(Thread(name, tuple(frames)))
    return [t for t in threads if not any(f.function == _HOOK_THREAD for f in t.frames)]


def main_thread(threads: Sequence[Thread]) -> Thread | None:
    """The thread that runs the script: its outermost frame is `<module>` (else the last)."""
    for thread in threads:
        if thread.frames and thread.frames[-1].function == "<module>":
            return thread
    return threads[-1] if threads else None


@dataclass(frozen=True)
class RankStack:
    """One worker's stacks, as its node's collector took them."""

    rank: int
    local_rank: int
    node: str
    pid: int
    threads: tuple[Thread, ...]
    sources: Mapping[str, str] = field(default_factory=dict)  # "path:line" -> code

    @property
    def main(self) -> tuple[Frame, ...]:
        thread = main_thread(self.threads)
        return thread.frames if thread else ()

    @property
    def in_collective(self) -> bool:
        return any(PurePosixPath(f.path).name in _COLLECTIVE_FILES for f in self.main)

    def label(self) -> str:
        """`all_reduce <- main (hang.py:63)`, `time.sleep(3600) <- sleep_forever (hang.py:28)`."""
        frames = self.main
        if not frames:
            return "(no Python frame)"
        inner = frames[0]
        user = next((f for f in frames if not f.library), inner)
        if inner is user:
            code = self.sources.get(f"{inner.path}:{inner.line}", "")
            what = code.split("#")[0].strip() or inner.function
            return f"{what} <- {inner.function} ({inner.where})"
        return f"{inner.function} <- {user.function} ({user.where})"


@dataclass(frozen=True)
class StackGroup:
    ranks: tuple[int, ...]
    stack: tuple[str, ...]  # the main thread's frames, innermost first: "file:line in function"
    label: str
    in_collective: bool
    suspect: bool = False


def ranks_from_report(node: str, report: Mapping[str, Any]) -> list[RankStack]:
    """A node collector's JSON report -> each worker's stacks."""
    return [
        RankStack(
            int(r["rank"]),
            int(r["local_rank"]),
            node,
            int(r["pid"]),
            tuple(parse_stacks(r.get("text", ""))),
            dict(r.get("sources", {})),
        )
        for r in report.get("ranks", [])
        if r.get("rank") is not None
    ]


def group_stacks(
    ranks: Iterable[RankStack], missing: set[int] | None = None, deadlock: bool = False
) -> list[StackGroup]:
    """Ranks folded by their main thread's frames; suspects marked; the suspects first, then
    the largest groups. `missing`: ranks the flight recorder saw never enter a collective the
    others are in; their groups are the suspects. `deadlock`: the flight recorder saw every
    missing rank wait in another group's collective; every group waiting is named."""
    by_stack: dict[tuple[str, ...], list[RankStack]] = {}
    for rank in sorted(ranks, key=lambda r: r.rank):
        by_stack.setdefault(tuple(str(f) for f in rank.main), []).append(rank)
    groups = [
        StackGroup(
            tuple(r.rank for r in members),
            stack,
            members[0].label(),
            members[0].in_collective,
        )
        for stack, members in by_stack.items()
    ]
    if missing:
        odd = {g.stack for g in groups if set(g.ranks) & missing}
    else:
        odd = _odd_ones(groups, deadlock)
    marked = [
        StackGroup(g.ranks, g.stack, g.label, g.in_collective, g.stack in odd) for g in groups
    ]
    return sorted(marked, key=lambda g: (not g.suspect, -len(g.ranks), g.ranks))


def _odd_ones(groups: Sequence[StackGroup], deadlock: bool = False) -> set[tuple[str, ...]]:
    if len(groups) < 2:
        return set()
    waiting = [g for g in groups if g.in_collective]
    if waiting and len(waiting) < len(groups):
        return {g.stack for g in groups if not g.in_collective}
    largest = max(len(g.ranks) for g in groups)
    smaller = {g.stack for g in groups if len(g.ranks) < largest}
    if waiting and (deadlock or not smaller):
        return {g.stack for g in waiting}  # each waits in its own collective: on each other
    return smaller


def is_deadlock(groups: Sequence[StackGroup]) -> bool:
    """Two or more groups, each waiting in a collective, every one of them a suspect."""
    return len(groups) > 1 and all(g.suspect and g.in_collective for g in groups)


def suspects(groups: Iterable[StackGroup]) -> list[int]:
    return sorted(r for g in groups if g.suspect for r in g.ranks)
