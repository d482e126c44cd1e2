"""Provides CycleWatch: an elastic job's rendezvous rounds (restart cycles), why each began,
who was in it, the step it reached, and the alarms for a restart storm and for no progress.

torchrun's agents each log `Rendezvous complete for workers` with the round's master,
`group_world_size` and `restart_count`; one round is every agent's report with one master
and one world size. What happened between two rounds (a node lost, a rank failed, the
operator's injection, a node joining) is the later round's cause.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from ddptui.core.events import Event
from ddptui.core.monitor.agent_log import Assigned, WorkerFailed
from ddptui.core.monitor.patterns import describe_exit

STORM_RESTARTS = 3  # this many restart cycles ...
STORM_WINDOW_S = 600.0  # ... within this long is a restart storm
STEP_REPORT_S = 5.0  # the current round's step reached is told again at most this often


class MembershipChange:
    """What happened to a node's place in the job (the `change` of MembershipChanged)."""

    LOST = "lost"  # its agent ended while the job goes on without it
    JOINED = "joined"  # a node (a spare) started to replace a lost one
    DRAINED = "drained"  # the operator excluded it
    KILLED = "killed"  # the operator's fault injection stopped its agent


@dataclass(frozen=True)
class CycleMember:
    """One node's place in a round: its group rank and its workers' global ranks."""

    node: str
    group_rank: int
    global_ranks: tuple[int, ...]


@dataclass(frozen=True)
class RestartCycle:
    """One rendezvous round: when it began, why, who was in it, the steps around it.

    `index` 0 is the first round; `cause` is why this round began ("start" for the first);
    `step_before` is the step the previous round reached; `step_reached` the highest step
    this round has reached so far (None: no progress line seen); `restarts` is torchrun's
    restart count in the round, of `max_restarts` allowed.
    """

    index: int
    started: float
    world_size: int
    members: tuple[CycleMember, ...]
    cause: str = "start"
    failed_node: str | None = None
    failed_rank: int | None = None
    step_before: int | None = None
    step_reached: int | None = None
    restarts: int = 0
    max_restarts: int = 0
    nodes_expected: int = 0  # group_world_size as the agents logged it

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(m.node for m in self.members)


@dataclass(frozen=True)
class CycleReport(Event):
    """A round began, grew, or ended: `{"event": "cycle", "cycle": {...}}` (the same index
    again replaces the earlier report)."""

    cycle: RestartCycle

    kind = "cycle"


@dataclass(frozen=True)
class MembershipChanged(Event):
    """A node left or joined an elastic job: `{"event": "membership", "node", "change", ...}`;
    `nodes` are the nodes whose agents still run, `min_nodes` the least the job needs."""

    node: str
    change: str
    nodes: tuple[str, ...]
    min_nodes: int = 0
    detail: str = ""

    kind = "membership"


@dataclass(frozen=True)
class RestartAlarm(Event):
    """A restart storm (`storm`: N cycles in M minutes) or restarts without progress
    (`no_progress`: a round ended no further than the one before it)."""

    alarm: str
    detail: str
    cycles: tuple[int, ...] = ()

    kind = "restart_alarm"


@dataclass
class _Pending:
    """What happened since the current round began: the next round's cause."""

    cause: str = ""
    node: str | None = None
    rank: int | None = None
    exit_code: int | None = None  # the failed worker's, when a worker's failure is the cause


@dataclass
class CycleWatch:
    """Every round of the run, from the agents' reports; the alarms as rounds end."""

    max_restarts: int = 0
    storm_restarts: int = STORM_RESTARTS
    storm_window_s: float = STORM_WINDOW_S
    cycles: list[RestartCycle] = field(default_factory=list)
    alarms: list[RestartAlarm] = field(default_factory=list)
    _masters: list[tuple[str, str, int]] = field(default_factory=list)
    _pending: _Pending = field(default_factory=_Pending)
    _restart_times: deque[float] = field(default_factory=deque)
    _stormed: bool = False
    _told: tuple[int, int | None] | None = None  # (index, step) the last report carried
    _told_at: float = 0.0
    _node_round: dict[str, int] = field(default_factory=dict)  # each node's latest round
    _failed_in: int | None = None  # the round of the pending cause's failed worker

    @property
    def current(self) -> RestartCycle | None:
        return self.cycles[-1] if self.cycles else None

    def restarts_used(self) -> int:
        return max((c.restarts for c in self.cycles), default=0)

    def assigned(self, node: str, fact: Assigned, now: float) -> list[Event]:
        """An agent's rendezvous result: a member of the current round, or a new round."""
        member = CycleMember(node, fact.group_rank, fact.global_ranks)
        key = (fact.master_addr, fact.master_port, max(fact.nodes, 0))
        index = self._round_of(node, key)
        if index is not None and node not in self.cycles[index].nodes:
            joined = self.cycles[index]
            grown = replace(
                joined,
                members=tuple(sorted((*joined.members, member), key=lambda m: m.group_rank)),
                world_size=joined.world_size + len(fact.global_ranks),
                restarts=max(joined.restarts, fact.restart_count),
            )
            pending = self._pending
            if (
                index > 0
                and pending.node == node
                and self._failed_in == index - 1
                and grown.failed_node is None
            ):  # a replayed log: this node's failure, read after the round it caused began
                grown = replace(
                    grown, cause=pending.cause, failed_node=pending.node, failed_rank=pending.rank
                )
                self._pending = _Pending()
            self.cycles[index] = grown
            self._node_round[node] = index
            return [CycleReport(grown, ts=now)]
        self._node_round[node] = len(self.cycles)
        return self._begin(member, key, fact, now)

    def _round_of(self, node: str, key: tuple[str, str, int]) -> int | None:
        """The round this rendezvous result joins, if it joins one: the round after the
        node's last if its master, port and node count match and it is not full, else the
        earliest such round, else (node count unknown) the current one. A log replayed node
        by node (attaching) gives one node's later rounds before another's first; torchrun's
        rounds share the master's port, so only the node count tells a round full."""
        if not self._masters:
            return None
        nodes = key[2]
        if nodes <= 0:
            current = len(self._masters) - 1
            return current if self._masters[-1] == key else None

        def open_to(index: int) -> bool:
            cycle = self.cycles[index]
            return (
                self._masters[index] == key
                and node not in cycle.nodes
                and len(cycle.members) < nodes
            )

        after = self._node_round.get(node, -1) + 1
        if after < len(self.cycles) and open_to(after):
            return after
        return next((i for i in range(len(self.cycles)) if open_to(i)), None)

    def _begin(
        self, member: CycleMember, key: tuple[str, str, int], fact: Assigned, now: float
    ) -> list[Event]:
        events: list[Event] = []
        previous = self.current
        pending, self._pending = self._pending, _Pending()
        cause = "start"
        if previous is not None:
            cause = pending.cause or "membership changed (a node joined or left)"
            events += self._round_ended(previous, now)
        cycle = RestartCycle(
            index=len(self.cycles),
            started=now,
            world_size=len(fact.global_ranks),
            members=(member,),
            cause=cause,
            failed_node=pending.node,
            failed_rank=pending.rank,
            step_before=previous.step_reached if previous else None,
            restarts=fact.restart_count,
            max_restarts=self.max_restarts,
            nodes_expected=max(fact.nodes, 0),
        )
        self.cycles.append(cycle)
        self._masters.append(key)
        events.append(CycleReport(cycle, ts=now))
        if previous is not None:
            events += self._storm(now)
        return events

    def _round_ended(self, ended: RestartCycle, now: float) -> list[Event]:
        """The round's last report (its step reached), and the no-progress alarm."""
        events: list[Event] = [CycleReport(ended, ts=now)]
        before = ended.step_before
        if ended.index > 0 and before is not None and (ended.step_reached or 0) <= before:
            reached = "no step" if ended.step_reached is None else f"step {ended.step_reached}"
            alarm = RestartAlarm(
                "no_progress",
                f"round {ended.index} reached {reached}, no further than round "
                f"{ended.index - 1} (step {before}): restarts without progress",
                (ended.index - 1, ended.index),
                ts=now,
            )
            self.alarms.append(alarm)
            events.append(alarm)
        return events

    def _storm(self, now: float) -> list[Event]:
        self._restart_times.append(now)
        while self._restart_times and now - self._restart_times[0] > self.storm_window_s:
            self._restart_times.popleft()
        if self._stormed or len(self._restart_times) < self.storm_restarts:
            return []
        self._stormed = True
        minutes = self.storm_window_s / 60
        alarm = RestartAlarm(
            "storm",
            f"restart storm: {len(self._restart_times)} restart cycles within {minutes:g} min "
            f"({self.restarts_used()} of {self.max_restarts} restarts used)",
            tuple(c.index for c in self.cycles[-len(self._restart_times) :]),
            ts=now,
        )
        self.alarms.append(alarm)
        return [alarm]

    def tick(self, now: float) -> list[Event]:
        """The current round again when its step reached moved (at most every few seconds),
        so the timeline shows the steps as they are reached."""
        current = self.current
        if current is None or now - self._told_at < STEP_REPORT_S:
            return []
        if (current.index, current.step_reached) == self._told:
            return []
        self._told, self._told_at = (current.index, current.step_reached), now
        return [CycleReport(current, ts=now)]

    def step(self, value: int) -> None:
        """A rank printed progress: the current round reached at least this step."""
        current = self.current
        if current is not None and (current.step_reached is None or value > current.step_reached):
            self.cycles[-1] = replace(current, step_reached=value)

    def worker_failed(self, node: str, fact: WorkerFailed) -> None:
        """A worker ended badly: the next round's cause, unless an earlier one is known. A
        worker killed by a signal outranks one that exited with an error seen first: its peers
        exit when it goes (gloo's "Connection closed by peer"), and may be told first."""
        if fact.exit_code == 0:
            return
        earlier = self._pending
        killed_after_exit = (
            fact.exit_code < 0 and earlier.exit_code is not None and earlier.exit_code > 0
        )
        if earlier.cause and not killed_after_exit:
            return
        rank = fact.rank if fact.rank is not None else self._global_rank(node, fact.local_rank)
        who = f"rank {rank}" if rank is not None else f"local rank {fact.local_rank}"
        self._failed_in = self._node_round.get(node)
        self._pending = _Pending(
            f"{who} on {node} failed ({describe_exit(fact.exit_code)})", node, rank, fact.exit_code
        )

    def _global_rank(self, node: str, local_rank: int) -> int | None:
        """The rank the current round gave this node's worker (torchrun's early failure line
        names only the local rank)."""
        index = self._node_round.get(node)
        current = self.cycles[index] if index is not None else self.current
        member = next((m for m in current.members if m.node == node), None) if current else None
        if member is None or not 0 <= local_rank < len(member.global_ranks):
            return None
        return member.global_ranks[local_rank]

    def node_left(self, node: str, change: str, exit_code: int | None, how: str = "") -> None:
        """A node's agent ended (lost, drained, killed): the next round's cause. The node
        itself outranks a worker's failure seen first: its loss is why the peers failed.
        `how` says who told a node lost with no exit code (else: its connection)."""
        said = {
            MembershipChange.DRAINED: "drained by the operator",
            MembershipChange.KILLED: "agent killed by the operator (fault injection)",
        }.get(
            change,
            f"agent lost ({describe_exit(exit_code)})"
            if exit_code
            else f"lost ({how or 'its connection: no exit code came'})",
        )
        if self._pending.node == node:
            return  # already told: the operator's action, or one of its own ranks first
        self._pending = _Pending(f"node {node} {said}", node, None)

    def node_joined(self, node: str) -> None:
        if not self._pending.cause:
            self._pending = _Pending(f"node {node} joined", node, None)

    def final(self) -> tuple[RestartCycle, ...]:
        return tuple(self.cycles)
