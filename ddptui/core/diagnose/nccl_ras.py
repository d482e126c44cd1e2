"""Provides NCCL RAS's view of a stalled job: its text answer read, two answers compared.

RAS (NCCL 2.24+) answers `STATUS` on its client port with a report of the job's communicators
(src/ras/client_support.cc): a table of communicator groups with their status (RUNNING, INIT,
FINALIZE, ABORT) and errors (OK, MISMATCH, ERROR, INCOMPLETE), then the errors (processes
missing or dead, ranks that did not answer) and warnings (ranks that launched different
numbers of operations). ddptui asks only on suspicion, on a stall of a job on NCCL, twice a
few seconds apart: operation counts that did not move are a frozen communicator. Polling a
healthy job is never done: polling RAS has crashed jobs (NVIDIA/nccl#1718 on 2.26.5, #1762 on
2.27.3, #1669 on 2.26.2 during init, #1996 a RAS segfault on 2.27.7), so versions before
2.28 are skipped. And RAS is never trusted alone: it said every communicator was RUNNING and
OK while PyTorch's watchdog timed out (#1730): its words are evidence beside the verdict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.core.events import Event

FIRST_SAFE = (2, 28, 0)  # RAS faults known before it: #1669, #1718, #1762, #1996

_VERSION = re.compile(r"^NCCL version (\d+)\.(\d+)\.(\d+)")
_GROUP = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)\s*$")
_LAUNCHED = re.compile(
    r"^\s*Rank (\d+) has (?:launched up to operation (\d+)|not launched any operations)"
    r"(?: -- GPU (\S+) managed by process (\d+) on node (\S+))?"
)
_DIFFERENT = re.compile(r"Communicator ranks have different (\w+) operation counts")
_COMM = re.compile(r"^#(\d+)-(\d+) \(([0-9a-f]+)\) ([A-Z,]+)$")
_PROCESS = re.compile(r"^\s*Process (\d+) on node (\S+) managing GPUs? (.+)$")
_MISSING_RANK = re.compile(r"^\s*Rank (\d+) -- GPU (\S+) managed by process (\d+) on node (\S+)")
_COUNT = re.compile(r"^\s*(\d+) job process")


def version_of(text: str) -> tuple[int, int, int] | None:
    """NCCL's version from the answer's first line (or `torch.cuda.nccl.version()`'s)."""
    for line in text.splitlines()[:6]:
        found = _VERSION.match(line.strip())
        if found:
            return (int(found[1]), int(found[2]), int(found[3]))
    return None


def may_ask(version: tuple[int, ...] | None) -> tuple[bool, str]:
    """Whether RAS may be asked on this NCCL version, and why not."""
    if version is None:
        return False, "NCCL version unknown: RAS not asked"
    shown = ".".join(map(str, version))
    if tuple(version[:2]) < (2, 24):
        return False, f"NCCL {shown} has no RAS"
    if tuple(version[:3]) < FIRST_SAFE:
        return False, f"NCCL {shown}: RAS has known faults there (NVIDIA/nccl#1718, #1762, #1996)"
    return True, ""


@dataclass(frozen=True)
class RasGroup:
    """One row of the communicators table: comms alike in size, nodes, status and errors."""

    group: int
    comms: int
    nodes: int
    ranks_per_comm: int
    status: str  # RUNNING | INIT | FINALIZE | ABORT | NOCOMM
    errors: str  # OK | MISMATCH | ERROR | INCOMPLETE, combined with commas


@dataclass(frozen=True)
class RasRank:
    """A rank RAS singled out: how far it launched (`ops`, None when not said) and where."""

    rank: int
    ops: int | None
    op: str = ""  # AllReduce, Broadcast...
    pid: int | None = None
    node: str = ""
    comm: str = ""  # the communicator's hash


@dataclass(frozen=True)
class RasAnswer:
    """What RAS said once: the version, the communicators, who is missing, dead or behind."""

    version: tuple[int, int, int] | None
    groups: tuple[RasGroup, ...] = ()
    launched: tuple[RasRank, ...] = ()  # ranks with differing operation counts
    missing: tuple[RasRank, ...] = ()  # ranks (or processes, rank -1) that did not answer
    dead: tuple[RasRank, ...] = ()  # processes RAS considers dead (rank -1: unknown)
    dead_count: int = 0
    timeouts: int = 0

    @property
    def healthy(self) -> bool:
        return all(g.status == "RUNNING" and g.errors == "OK" for g in self.groups) and not (
            self.dead_count or self.missing or self.launched
        )

    def behind(self) -> list[RasRank]:
        """The ranks that launched fewer operations than the most (of each op) did."""
        top: dict[tuple[str, str], int] = {}
        for r in self.launched:
            top[(r.comm, r.op)] = max(top.get((r.comm, r.op), 0), r.ops or 0)
        return [r for r in self.launched if (r.ops or 0) < top[(r.comm, r.op)]]


def parse(text: str) -> RasAnswer:
    """RAS's text answer (ncclras's output, or the client port's, preamble and all)."""
    groups: list[RasGroup] = []
    launched: list[RasRank] = []
    missing: list[RasRank] = []
    dead: list[RasRank] = []
    dead_count = timeouts = 0
    section, comm, op = "", "", ""
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if stripped in ("Errors", "Warnings") or stripped.startswith("Communicators..."):
            section, comm = stripped.split(".")[0], ""
            continue
        if stripped in ("INCOMPLETE", "DEAD", "TIMEOUT"):
            comm, op = stripped, ""
            continue
        if section == "Communicators" and (found := _GROUP.match(line)):
            groups.append(
                RasGroup(
                    int(found[1]), int(found[2]), int(found[3]), int(found[5]), found[7], found[8]
                )  # fmt: skip
            )
        elif found := _COMM.match(stripped):
            comm, op = found[3], ""
        elif found := _DIFFERENT.search(stripped):
            op = found[1]
        elif found := _LAUNCHED.match(line):
            ops = int(found[2]) if found[2] else 0
            pid = int(found[4]) if found[4] else None
            launched.append(RasRank(int(found[1]), ops, op, pid, found[5] or "", comm))
        elif found := _MISSING_RANK.match(line):
            missing.append(RasRank(int(found[1]), None, "", int(found[3]), found[4], comm))
        elif found := _PROCESS.match(line):
            who = RasRank(-1, None, "", int(found[1]), found[2], comm)
            (dead if comm == "DEAD" else missing).append(who)
        elif comm == "DEAD" and (found := _COUNT.match(line)):
            dead_count = int(found[1])
        elif comm == "TIMEOUT" and (found := re.search(r"Encountered (\d+)", line)):
            timeouts = int(found[1])
    return RasAnswer(
        version_of(text),
        tuple(groups),
        tuple(launched),
        tuple(missing),
        tuple(dead),
        dead_count or len(dead),
        timeouts,
    )


def said(first: RasAnswer, second: RasAnswer, apart_s: float) -> tuple[str, ...]:
    """What the two answers say together, in lines for the stall's verdict."""
    lines: list[str] = []
    for g in second.groups:
        lines.append(
            f"{g.comms} communicator(s) of {g.ranks_per_comm} ranks on {g.nodes} node(s): "
            f"{g.status}, {g.errors}"
        )
    for r in second.behind():
        where = f" (process {r.pid} on {r.node})" if r.pid else ""
        lines.append(f"rank {r.rank} launched {r.op} operations up to {r.ops} only{where}")
    before = {(r.comm, r.op, r.rank): r.ops for r in first.launched}
    now = {(r.comm, r.op, r.rank): r.ops for r in second.launched}
    if now and before == now:
        lines.append(f"operation counts unchanged over {apart_s:.0f} s: communicator frozen")
    for r in second.dead:
        lines.append(f"dead: process {r.pid} on {r.node}")
    if second.dead_count > len(second.dead):
        lines.append(f"{second.dead_count} process(es) dead")
    for r in second.missing:
        who = f"rank {r.rank}" if r.rank >= 0 else "a process"
        lines.append(f"no answer from {who}: process {r.pid} on {r.node}")
    if second.healthy:
        lines.append("RAS sees every communicator RUNNING and OK (it may, in a hang: #1730)")
    return tuple(lines)


def suspects(answers: Sequence[RasAnswer]) -> set[int]:
    """The ranks RAS singles out (behind, or missing), in every answer given."""
    out: set[int] = set()
    for answer in answers:
        out |= {r.rank for r in answer.behind()}
        out |= {r.rank for r in answer.missing if r.rank >= 0}
    return out


@dataclass(frozen=True)
class RasReport(Event):
    """What NCCL RAS said of a stalled job on NCCL, asked twice `apart_s` apart (or why it was
    not asked). Headless: `{"event": "ras", "ts", "asked", "skipped", "nodes": {node: [lines]},
    "suspects": [ranks RAS singles out], "problems": [...]}`; never a verdict on its own."""

    asked: bool
    skipped: str = ""
    nodes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    suspects: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()

    kind = "ras"

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "ts": self.ts,
            "asked": self.asked,
            "skipped": self.skipped,
            "nodes": {node: list(lines) for node, lines in self.nodes},
            "suspects": list(self.suspects),
            "problems": list(self.problems),
        }


def report(
    first: Mapping[str, str | BaseException],
    second: Mapping[str, str | BaseException],
    apart_s: float,
    now: float,
) -> RasReport:
    """Each node's two answers (or why it gave none) read into one report."""
    nodes: list[tuple[str, tuple[str, ...]]] = []
    problems: list[str] = []
    answers: list[RasAnswer] = []
    for node, text in second.items():
        before = first.get(node)
        if isinstance(text, BaseException) or isinstance(before, BaseException) or before is None:
            problems.append(f"{node}: {text if isinstance(text, BaseException) else before}")
            continue
        one, two = parse(before), parse(text)
        answers += [one, two]
        nodes.append((node, said(one, two, apart_s)))
    return RasReport(
        True, "", tuple(nodes), tuple(sorted(suspects(answers))), tuple(problems), ts=now
    )
