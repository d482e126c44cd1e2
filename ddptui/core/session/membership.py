"""Provides Membership: which nodes of an elastic job run, which wait as spares, whether the
job goes on when one leaves, and the operator's actions on a node (kill, drain, kill a rank).

A fixed job ends when a node is lost (the session stops the others, which would wait in
torchrun's exit barrier); an elastic job (`--nodes MIN:MAX`) goes on while MIN nodes remain,
its agents restarting their workers in a new rendezvous round, and a spare host joins it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ddptui.core.events import Event, Notice
from ddptui.core.job.elastic import node_range
from ddptui.core.job.plan import NodeCommand
from ddptui.core.job.spec import JobSpec
from ddptui.core.monitor.cycles import MembershipChange, MembershipChanged, RestartCycle
from ddptui.core.monitor.lighthouse import QuorumChange
from ddptui.core.session.drill import DRILL_WORD, DrillAsked


class NodeActionKind(enum.StrEnum):
    """What the operator does to a running node (each asked behind a confirmation)."""

    KILL = "kill"  # fault injection: its agent stopped as a lost node's would be
    DRAIN = "drain"  # exclude it: its agent stopped, never restarted; the job goes on
    KILL_RANK = "kill_rank"  # fault injection: one worker killed (SIGKILL), its agent reacts
    # fault injection in a torchft job: every worker of the node's replica group killed; its
    # torchrun starts them again and they heal from a live group
    KILL_GROUP = "kill_group"


@dataclass(frozen=True)
class NodeAction:
    """The operator's action on one node (or one rank of it: `local_rank`)."""

    kind: NodeActionKind
    node: str
    local_rank: int | None = None


def parse_action(line: str) -> NodeAction | DrillAsked | None:
    """`kill NODE`, `drain NODE`, `kill_group NODE` or `kill_rank NODE LOCAL_RANK`, or `drill`
    (a preemption drill of the whole job: drill.py) (headless mode's control file); None for
    anything else."""
    words = line.split()
    if words == [DRILL_WORD]:
        return DrillAsked()
    whole = (NodeActionKind.KILL, NodeActionKind.DRAIN, NodeActionKind.KILL_GROUP)
    if len(words) == 2 and words[0] in whole:
        return NodeAction(NodeActionKind(words[0]), words[1])
    if len(words) == 3 and words[0] == NodeActionKind.KILL_RANK and words[2].isdigit():
        return NodeAction(NodeActionKind.KILL_RANK, words[1], int(words[2]))
    return None


class Membership:
    """The nodes started, the spares held back, and the nodes the operator took out."""

    def __init__(self, spec: JobSpec, emit: Callable[[Event], None]) -> None:
        self.spec = spec
        self.range = node_range(spec)
        self._emit = emit
        self.spares: list[NodeCommand] = []
        self.left: dict[str, MembershipChange | str] = {}  # node -> drained / killed
        self.lost: set[str] = set()  # nodes whose agents ended badly while the job went on

    @property
    def elastic(self) -> bool:
        """Whether the job's size may change (MIN:MAX); a fixed job with spares keeps its
        size by replacing a lost node."""
        return self.range.elastic

    def split(self, commands: Sequence[NodeCommand]) -> tuple[NodeCommand, ...]:
        """The commands to start now; the rest (the spares) wait for a lost node."""
        if not self.spec.spares or len(commands) <= self.spec.nodes:
            return tuple(commands)
        self.spares = list(commands[self.spec.nodes :])
        return tuple(commands[: self.spec.nodes])

    def is_spare(self, node: str) -> bool:
        return any(c.node == node for c in self.spares)

    def drained(self, node: str) -> bool:
        return self.left.get(node) == MembershipChange.DRAINED

    def operator_took(self, node: str, action: NodeAction) -> str:
        """The operator's kill or drain of `node`: remembered; the change's name."""
        change = (
            MembershipChange.DRAINED
            if action.kind == NodeActionKind.DRAIN
            else MembershipChange.KILLED
        )
        self.left[node] = change
        return change

    def node_left(
        self, node: str, node_exit: Mapping[str, int | None]
    ) -> tuple[bool, NodeCommand | None]:
        """A node's agent ended badly (or was taken out): whether the job goes on (never for
        a fixed job, nor when fewer than MIN would remain), and the spare that joins (None:
        none left). When it goes on, the change is emitted."""
        running = tuple(n for n, code in node_exit.items() if code is None and n != node)
        if self.spec.ft_replicas:
            return self._group_left(node, running), None
        spare = self.spares[0] if self.spares else None
        after = len(running) + (1 if spare is not None else 0)
        replaceable = self.elastic or spare is not None  # a fixed job waits for its spare
        if not replaceable or self.spec.max_restarts == 0 or after < self.range.min_nodes:
            if self.elastic:
                self._emit(
                    Notice(
                        "error",
                        f"{node} left: {len(running)} node(s) remain, fewer than the "
                        f"{self.range.min_nodes} the job needs (--nodes {self.range})",
                    )
                )
            return False, None
        change = self.left.get(node, MembershipChange.LOST)
        detail = f"{len(running)} node(s) go on (at least {self.range.min_nodes})"
        if spare is not None:
            self.spares.pop(0)
            detail += f"; spare {spare.node} joins"
        self._emit(MembershipChanged(node, str(change), running, self.range.min_nodes, detail))
        return True, spare

    def _group_left(self, node: str, running: tuple[str, ...]) -> bool:
        """A torchft job's replica group ended (its torchrun gave up, or was killed): the
        others go on while the Lighthouse can still make a quorum of them."""
        least = self.spec.ft_min_replicas
        if len(running) < least:
            self._emit(
                Notice(
                    "error",
                    f"replica group {node} left: {len(running)} group(s) remain, fewer than "
                    f"the quorum's {least} (--ft-min-replicas)",
                )
            )
            return False
        self.lost.add(node)
        change = self.left.get(node, MembershipChange.LOST)
        detail = f"{len(running)} replica group(s) go on (the quorum needs {least})"
        self._emit(MembershipChanged(node, str(change), running, least, detail))
        return True

    def ft_outcome(self, quorums: Sequence[QuorumChange]) -> str:
        """A torchft run that finished, in words: its groups, its quorum changes."""
        groups = self.spec.ft_replicas - len(self.lost)
        return (
            f"torchft: finished on {groups} of {self.spec.ft_replicas} replica group(s), "
            f"quorum changed {len(quorums)} time(s)"
        )

    def joined(self, spare: NodeCommand, node_exit: Mapping[str, int | None]) -> None:
        running = tuple(n for n, code in node_exit.items() if code is None)
        self._emit(
            MembershipChanged(
                spare.node,
                MembershipChange.JOINED,
                running,
                self.range.min_nodes,
                "a spare host started: it joins the next rendezvous round",
            )
        )

    def finished_ok(
        self, cycles: Sequence[RestartCycle], node_exit: Mapping[str, int | None]
    ) -> bool | None:
        """An elastic run's own success: every node of its last round exited 0 (the nodes
        lost on the way are its history, not its outcome); None for a fixed job without spares."""
        if self.spec.ft_replicas:  # the groups that stayed finished
            stayed = [n for n in node_exit if n not in self.lost]
            return bool(stayed) and all(node_exit[n] == 0 for n in stayed)
        if not (self.elastic or self.spec.spares) or not cycles:
            return None
        last = cycles[-1].nodes
        return bool(last) and all(node_exit.get(n) == 0 for n in last)
