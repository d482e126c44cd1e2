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

from ddptui.core.events import Event

_QUORUM = re.compile(r"Quorum! Quorum \{ quorum_id: (\d+), participants: \[(.*)\], created")
_MEMBER = re.compile(
    r'QuorumMember \{ replica_id: "([^"]*)".*?step: (\d+), world_size: (\d+)'
    r".*?commit_failures: (\d+)"
)
_HEARTBEATING = re.compile(r"Quorum status: .*\[(\d+) heartbeating\]")
HISTORY_KEPT = 64  # quorum changes remembered (a run that loses a group a minute: an hour)
REPORT_EVERY_S = 1.0  # the steps and lags of an unchanged quorum: reported at most this often


@dataclass(frozen=True)
class ReplicaStep:
    """One replica group in a quorum: its name (`ft_0`, the id before torchft's `:uuid`),
    the step it reported, its group's world size and its commit failures so far."""

    replica: str
    step: int
    world_size: int
    commit_failures: int
    incarnation: str = ""  # the id after `:` (a group started again is another incarnation)


@dataclass(frozen=True)
class QuorumChange:
    """A quorum whose members differ from the one before: who joined, who left, who came back
    as another incarnation before the Lighthouse saw it gone (`restarted`), and how far
    behind the furthest each group that joined or came back was (it heals from a peer)."""

    quorum_id: int
    members: tuple[str, ...]
    joined: tuple[str, ...]
    left: tuple[str, ...]
    ts: float
    behind: tuple[tuple[str, int], ...] = ()
    restarted: tuple[str, ...] = ()

    def said(self) -> str:
        """`quorum 4: ft_1 joined (42 steps behind: heals from a peer)`, in one line."""
        parts = []
        lag = dict(self.behind)
        for replica in (*self.joined, *self.restarted):
            steps = lag.get(replica, 0)
            heal = f" ({steps} steps behind: heals from a peer)" if steps else ""
            how = "joined" if replica in self.joined else "started again"
            parts.append(f"{replica} {how}{heal}")
        parts += [f"{replica} left" for replica in self.left]
        return f"quorum {self.quorum_id}: {', '.join(parts) or 'formed'}"


@dataclass(frozen=True)
class QuorumReport(Event):
    """torchft's quorum as the Lighthouse hands it out: `{"event": "quorum", "quorum_id",
    "members": [{"replica", "step", "world_size", "commit_failures"}], "lag": [[replica,
    steps], ...], "change": {...} | null, "heartbeating"}`. Sent when the members change
    (`change` says how), else at most once every REPORT_EVERY_S (their steps move on)."""

    quorum_id: int
    members: tuple[ReplicaStep, ...]
    lag: tuple[tuple[str, int], ...]
    change: QuorumChange | None = None
    heartbeating: int = -1  # groups whose Manager beats the Lighthouse's heart (-1: not said)

    kind = "quorum"


def replica_name(replica_id: str) -> str:
    """`ft_0:7358e2ca-...` -> `ft_0`: the group, whatever incarnation of it."""
    return replica_id.split(":", 1)[0]


def _member(found: re.Match[str]) -> ReplicaStep:
    name, _, incarnation = found[1].partition(":")
    return ReplicaStep(name, int(found[2]), int(found[3]), int(found[4]), incarnation)


def read_quorum(line: str) -> tuple[int, tuple[ReplicaStep, ...]] | None:
    """A `Quorum! Quorum { ... }` line's id and members, or None for any other line."""
    found = _QUORUM.search(line)
    if found is None:
        return None
    members = tuple(_member(m) for m in _MEMBER.finditer(found[2]))
    return int(found[1]), members


class LighthouseWatch:
    """The Lighthouse's quorums as they come: the newest, and the changes of membership."""

    def __init__(self) -> None:
        self.quorum_id = -1
        self.members: tuple[ReplicaStep, ...] = ()
        self.changes: list[QuorumChange] = []
        self.heartbeating = -1
        self._reported = 0.0

    def report(self, line: str, ts: float) -> QuorumReport | None:
        """One line of the Lighthouse's log, as the console reports it: the quorum when its
        members changed, or when it moved on and the last report is REPORT_EVERY_S old."""
        if "heartbeating]" in line:
            beating = _HEARTBEATING.search(line)
            if beating is not None:
                self.heartbeating = int(beating[1])
            return None
        before = self.quorum_id, self.members
        change = self.feed(line, ts)
        if change is None and (
            (self.quorum_id, self.members) == before or ts - self._reported < REPORT_EVERY_S
        ):
            return None
        self._reported = ts
        lag = tuple(sorted(self.lag().items()))
        return QuorumReport(self.quorum_id, self.members, lag, change, self.heartbeating, ts=ts)

    def feed(self, line: str, ts: float) -> QuorumChange | None:
        """One line of the Lighthouse's log; the change it makes to the membership, if any
        (a quorum of the same members at the next step is no change)."""
        if "Quorum! " not in line:
            return None
        read = read_quorum(line)
        if read is None:
            return None
        quorum_id, members = read
        was = {m.replica: m.incarnation for m in self.members}
        before, now = set(was), {m.replica for m in members}
        restarted = tuple(
            sorted(m.replica for m in members if was.get(m.replica, m.incarnation) != m.incarnation)
        )
        first = self.quorum_id < 0
        self.quorum_id, self.members = quorum_id, members
        if not first and now == before and not restarted:
            return None
        joined = tuple(sorted(now - before))
        lag = self.lag()
        change = QuorumChange(
            quorum_id,
            tuple(sorted(now)),
            joined,
            tuple(sorted(before - now)),
            ts,
            tuple((replica, lag[replica]) for replica in (*joined, *restarted)),
            restarted,
        )
        self.changes = [*self.changes, change][-HISTORY_KEPT:]
        return change

    def lag(self) -> dict[str, int]:
        """Each group of the newest quorum: how many steps it is behind the furthest."""
        if not self.members:
            return {}
        top = max(m.step for m in self.members)
        return {m.replica: top - m.step for m in self.members}
