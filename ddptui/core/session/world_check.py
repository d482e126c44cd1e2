"""Provides the world check: every node's rendezvous compared with the job's, at start.

Why: a node pointed at the wrong rendezvous (a `localhost` fallback, a wrong endpoint, a
name that resolves to the node itself) forms a world of its own, and with a fixed --nnodes
everyone then waits: torchrun says nothing until its join timeout (15 minutes). And when
another process holds the rendezvous port on the first node, the agent there silently joins
it as a client (c10d falls back when it cannot bind) and waits too. Each node's agent says
which rendezvous it was started for (its launch configs) and, once formed, the world it got
(its result); the nodes themselves can say who listens on the rendezvous port. From those,
this check names the node at fault within seconds, as a launch failure.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.core.events import Event, RankChanged, RendezvousAsked, WorldJoined
from ddptui.core.job.plan import LaunchPlan
from ddptui.core.monitor.patterns import PORT_IN_USE, RENDEZVOUS_CONNECT
from ddptui.core.node.netinfo import holder_words

PROBE_AFTER_S = 5.0  # no world yet this long after launch: ask the nodes who holds the port
PROBE_EVERY_S = 10.0
PROBE_UNTIL_S = 120.0
PROBE_AT_MOST = 16  # nodes asked per round besides the first (at 512 hosts: a few rounds)
PROBE_CONFIRM_S = 2.0  # a holder found once is asked about again this soon, before it is named
_ASK_NOW = frozenset({PORT_IN_USE, RENDEZVOUS_CONNECT})


class WorldCause(enum.StrEnum):
    """Why the job's world is not the one asked for (a FailureRecord's cause)."""

    SPLIT_WORLD = "split_world"  # a node in a rendezvous of its own
    SMALL_WORLD = "small_world"  # a world formed with fewer nodes or workers than asked
    PORT_TAKEN = "rdzv_port_taken"  # another process holds the rendezvous port
    NEVER_JOINED = "never_joined"  # a node that never came: the others timed out waiting


@dataclass(frozen=True)
class WorldProblem:
    """The node at fault, why, and the words for the operator (and the verdict)."""

    node: str
    cause: WorldCause
    explanation: str


class WorldCheck:
    """Compares what each node's agent says of its rendezvous with the job's plan."""

    def __init__(
        self,
        plan: LaunchPlan,
        started: float,
        compare_endpoint: bool = True,
        spares: frozenset[str] = frozenset(),
    ) -> None:
        """`compare_endpoint`: the nodes' commands carry the plan's endpoint and run id as
        written (local, SSH); a batch script computes its own, so it is not compared.
        `spares`: nodes of the plan held back until one is lost (not in the first world)."""
        self.plan = plan
        self.spares = spares
        self.started = started
        self.compare_endpoint = compare_endpoint
        self.joined: dict[str, WorldJoined] = {}
        self.asked: dict[str, RendezvousAsked] = {}
        self._rotation = 0
        self._next_probe = started + PROBE_AFTER_S
        self._last_probe = started
        self._suspect: tuple[str, WorldCause] | None = None
        self._last_asked: list[str] = []
        self._expected_nodes = len(plan.commands) - len(spares & set(plan.node_names))
        self._expected_world = self._expected_nodes * plan.nproc_per_node
        self.port = int(plan.rdzv_endpoint.rsplit(":", 1)[1]) if ":" in plan.rdzv_endpoint else 0

    def complete(self) -> bool:
        """Every node has joined a world (the check then has nothing more to ask)."""
        return len(self.joined) >= self._expected_nodes

    @property
    def head(self) -> str:
        return self.plan.commands[0].node

    def seen(self, event: Event) -> WorldProblem | None:
        """A node's agent said which rendezvous it asked for, or which world it got."""
        match event:
            case RendezvousAsked():
                return self._asked(event)
            case WorldJoined():
                self.joined[event.node] = event
                return self._joined(event)
            case RankChanged(diagnoses=said) if any(d.kind in _ASK_NOW for d in said):
                self._next_probe = 0.0  # the port taken, or its store not answering: ask now
        return None

    def _asked(self, event: RendezvousAsked) -> WorldProblem | None:
        self.asked[event.node] = event
        plan = self.plan
        if self.compare_endpoint and (
            event.endpoint != plan.rdzv_endpoint or event.run_id != plan.run_id
        ):
            return WorldProblem(
                event.node,
                WorldCause.SPLIT_WORLD,
                f"{event.node} was started for another rendezvous: its agent asked "
                f"{event.endpoint} (run id {event.run_id}), the job's is {plan.rdzv_endpoint} "
                f"(run id {plan.run_id}) on {self.head}: it would form a world of its own while "
                "the other nodes wait for it (a localhost fallback, or a wrong endpoint)",
            )
        if 0 <= event.max_nodes < self._expected_nodes:
            return WorldProblem(
                event.node,
                WorldCause.SMALL_WORLD,
                f"{event.node}'s agent was told --nnodes {event.min_nodes}:{event.max_nodes}, "
                f"the job has {self._expected_nodes} nodes: its world would be too small",
            )
        return None

    def _joined(self, event: WorldJoined) -> WorldProblem | None:
        asked_nodes, asked_world = self._expected_nodes, self._expected_world
        asked = self.asked.get(event.node)
        if asked is not None and 0 < asked.min_nodes < asked.max_nodes:  # elastic: its floor
            asked_nodes = min(asked_nodes, asked.min_nodes)
            asked_world = asked_nodes * self.plan.nproc_per_node
        if event.nodes == 1 and asked_nodes > 1:
            return WorldProblem(
                event.node,
                WorldCause.SPLIT_WORLD,
                f"{event.node} is alone in its own world (1 node, {event.world_size} "
                f"worker(s), rank 0 on {event.master_addr}): the job asked {asked_nodes} "
                f"nodes rendezvousing at {self.plan.rdzv_endpoint}; it was pointed at itself "
                "(a localhost fallback, or a wrong endpoint)",
            )
        if event.nodes < asked_nodes or 0 <= event.world_size < asked_world:
            return WorldProblem(
                event.node,
                WorldCause.SMALL_WORLD,
                f"{event.node} joined a world of {event.nodes} node(s) and {event.world_size} "
                f"worker(s); the job asked {asked_nodes} nodes and {asked_world} workers",
            )
        masters = {j.master_addr for j in self.joined.values()}
        if len(masters) > 1:
            first = next(iter(self.joined.values()))
            return WorldProblem(
                event.node,
                WorldCause.SPLIT_WORLD,
                f"{event.node} joined a world around {event.master_addr}, {first.node} one "
                f"around {first.master_addr}: the nodes formed separate worlds",
            )
        return None

    def never_joined(self, failed: str) -> WorldProblem | None:
        """`failed`'s agent ended before the world was complete, having asked for the
        rendezvous and joined none: it waited for the nodes that never came until its join
        timeout. Names the first of them (one whose agent never even asked, before one that
        asked and got nowhere)."""
        if self.complete() or failed not in self.asked or failed in self.joined:
            return None
        waited = [
            c.node
            for c in self.plan.commands
            if c.node not in self.joined and c.node not in self.spares and c.node != failed
        ]
        missing = sorted(waited, key=lambda node: node in self.asked)
        if not missing:
            return None
        node = missing[0]
        how = (
            "its agent asked for it but never got in"
            if node in self.asked
            else "its agent never asked for it"
        )
        return WorldProblem(
            node,
            WorldCause.NEVER_JOINED,
            f"{node} never joined the rendezvous ({how}): {failed} waited for it at "
            f"{self.plan.rdzv_endpoint} until its join timeout (a node that hangs before "
            f"torchrun starts, or cannot reach {self.head})",
        )

    def probe_due(self, now: float) -> list[str]:
        """The nodes to ask who holds the rendezvous port now: while the world is not
        complete, after PROBE_AFTER_S and every PROBE_EVERY_S until PROBE_UNTIL_S; the first
        node, and every node on an address of its own that has not joined."""
        if self.complete() or not self.port:
            return []
        if now < self._next_probe or now - self.started > PROBE_UNTIL_S:
            return []
        self._last_probe = now
        self._next_probe = now + PROBE_EVERY_S
        if self._suspect is not None:  # confirming: the same nodes again
            return self._last_asked
        head = self.plan.commands[0]
        apart = [
            c.node
            for c in self.plan.commands[1:]
            if not _same_host(c.address, head.address)
            and c.node not in self.joined
            and c.node not in self.spares
        ]
        start = self._rotation % len(apart) if apart else 0
        self._rotation += PROBE_AT_MOST
        self._last_asked = [head.node] + (apart[start:] + apart[:start])[:PROBE_AT_MOST]
        return self._last_asked

    def holders_seen(
        self, holders: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> WorldProblem | None:
        """Each asked node's listeners on the rendezvous port (netinfo.port_holders): on the
        first node, one that is not this job's holds the port; elsewhere, the node's own
        agent listening means it serves a rendezvous of its own. A finding is named only when
        the next probe, PROBE_CONFIRM_S later, finds it again: a listener caught while its
        process exits (an agent at its join timeout, its files closed and its environment
        gone) is no holder."""
        found = self._holders_problem(holders)
        suspect = (found.node, found.cause) if found else None
        if found is None or suspect != self._suspect:
            self._suspect = suspect
            if found is not None:
                self._next_probe = self._last_probe + PROBE_CONFIRM_S
            return None
        return found

    def _holders_problem(
        self, holders: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> WorldProblem | None:
        tags = {c.node: c.tag for c in self.plan.commands}
        ours = {c.tag for c in self.plan.commands}
        # A listener the head sees too is the one store of a host they share (pseudo-nodes
        # of one machine): whichever agent bound the port first serves it for all.
        shared = {h.get("pid") for h in holders.get(self.head, ())} - {None}
        for node, found in holders.items():
            if node == self.head:
                foreign = [h for h in found if h.get("tag") not in ours]
                if foreign and not any(h.get("tag") in ours for h in found):
                    return WorldProblem(
                        node,
                        WorldCause.PORT_TAKEN,
                        f"port {self.port} on {node} is in use by {holder_words(dict(foreign[0]))}"
                        ": the job's rendezvous cannot be served there (the agent joined "
                        "that process as a client and waits); choose another with --rdzv-port",
                    )
            elif any(h.get("tag") == tags.get(node) and h.get("pid") not in shared for h in found):
                return WorldProblem(
                    node,
                    WorldCause.SPLIT_WORLD,
                    f"{node} serves a rendezvous of its own on port {self.port} (its agent "
                    f"hosts a c10d store; the job's is on {self.head} at "
                    f"{self.plan.rdzv_endpoint}): {node} is alone in its own world, pointed at "
                    "itself (a localhost fallback, or a name that resolves to the node)",
                )
        return None


def _same_host(one: str, other: str) -> bool:
    """Two addresses of one host as far as the plan tells: equal, or both loopback (the
    local backend's pseudo-nodes, 127.0.0.2, 127.0.0.3, ...: one network namespace)."""
    return one == other or (one.startswith("127.") and other.startswith("127."))
