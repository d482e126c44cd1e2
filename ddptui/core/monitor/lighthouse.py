"""Provides LighthouseWatch: what torchft's Lighthouse knows, read from its own log lines.

The Lighthouse (`torchft_lighthouse`) logs every quorum it hands out, whole: `Quorum! Quorum {
quorum_id: 3, participants: [QuorumMember { replica_id: "ft_0:<uuid>", address: ..., step: 48,
world_size: 1, commit_failures: 0, ... }, ...], created: ... }`, and `Detected quorum change,
bumping quorum_id to 3` when the members changed. Each replica group asks for a quorum at
every step, so these lines come at the job's step rate: the watch keeps the newest quorum and
the history of its changes (which groups joined, which left), and each group's lag behind the
furthest (a group that heals from a peer starts behind and catches up at once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_QUORUM = re.compile(r"Quorum! Quorum \{ quorum_id: (\d+), participants: \[(.*)\], created")
_MEMBER = re.compile(
    r'QuorumMember \{ replica_id: "([^"]*)".*?step: (\d+), world_size: (\d+)'
    r".*?commit_failures: (\d+)"
)
HISTORY_KEPT = 64  # quorum changes remembered (a run that loses a group a minute: an hour)


@dataclass(frozen=True)
class ReplicaStep:
    """One replica group in a quorum: its name (`ft_0`, the id before torchft's `:uuid`),
    the step it reported, its group's world size and its commit failures so far."""

    replica: str
    step: int
    world_size: int
    commit_failures: int


@dataclass(frozen=True)
class QuorumChange:
    """A quorum whose members differ from the one before: who joined, who left."""

    quorum_id: int
    members: tuple[str, ...]
    joined: tuple[str, ...]
    left: tuple[str, ...]
    ts: float


def replica_name(replica_id: str) -> str:
    """`ft_0:7358e2ca-...` -> `ft_0`: the group, whatever incarnation of it."""
    return replica_id.split(":", 1)[0]


def read_quorum(line: str) -> tuple[int, tuple[ReplicaStep, ...]] | None:
    """A `Quorum! Quorum { ... }` line's id and members, or None for any other line."""
    found = _QUORUM.search(line)
    if found is None:
        return None
    members = tuple(
        ReplicaStep(replica_name(m[1]), int(m[2]), int(m[3]), int(m[4]))
        for m in _MEMBER.finditer(found[2])
    )
    return int(found[1]), members


class LighthouseWatch:
    """The Lighthouse's quorums as they come: the newest, and the changes of membership."""

    def __init__(self) -> None:
        self.quorum_id = -1
        self.members: tuple[ReplicaStep, ...] = ()
        self.changes: list[QuorumChange] = []

    def feed(self, line: str, ts: float) -> QuorumChange | None:
        """One line of the Lighthouse's log; the change it makes to the membership, if any
        (a quorum of the same members at the next step is no change)."""
        if "Quorum! " not in line:
            return None
        read = read_quorum(line)
        if read is None:
            return None
        quorum_id, members = read
        before = {m.replica for m in self.members}
        now = {m.replica for m in members}
        first = self.quorum_id < 0
        self.quorum_id, self.members = quorum_id, members
        if not first and now == before:
            return None
        change = QuorumChange(
            quorum_id,
            tuple(sorted(now)),
            tuple(sorted(now - before)),
            tuple(sorted(before - now)),
            ts,
        )
        self.changes = [*self.changes, change][-HISTORY_KEPT:]
        return change

    def lag(self) -> dict[str, int]:
        """Each group of the newest quorum: how many steps it is behind the furthest."""
        if not self.members:
            return {}
        top = max(m.step for m in self.members)
        return {m.replica: top - m.step for m in self.members}
