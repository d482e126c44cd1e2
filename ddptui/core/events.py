"""Provides the typed events a session emits: the one vocabulary of the UI and headless mode."""

from __future__ import annotations

import dataclasses
import enum
import json
import time
from dataclasses import dataclass, field
from typing import Any


class RankState(enum.StrEnum):
    """Where one rank is in its life, in the order a healthy rank passes through them."""

    PENDING = "pending"
    ASSIGNED = "assigned"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    HUNG = "hung"

    @property
    def final(self) -> bool:
        return self in (RankState.DONE, RankState.FAILED)


class NodeState(enum.StrEnum):
    """What the console knows of one node's agent."""

    WAITING = "waiting"
    CONNECTING = "connecting"
    AUTHENTICATED = "authenticated"
    LAUNCHED = "launched"
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"
    STOPPING = "stopping"
    DETACHED = "detached"


@dataclass(frozen=True)
class Event:
    """Base of every event; `ts` is wall-clock seconds when the console saw it."""

    ts: float = field(default_factory=time.time, kw_only=True)

    kind = "event"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"event": self.kind}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            data[f.name] = value.value if isinstance(value, enum.Enum) else value
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)


@dataclass(frozen=True)
class NodeLine(Event):
    """One line of a node's output, attributed to a rank when its origin is known."""

    node: str
    text: str
    rank: int | None = None
    local_rank: int | None = None

    kind = "line"


@dataclass(frozen=True)
class RankChanged(Event):
    """A rank moved to another state."""

    rank: int | None
    node: str
    local_rank: int
    state: RankState
    exit_code: int | None = None
    detail: str = ""

    kind = "rank"


@dataclass(frozen=True)
class NodeChanged(Event):
    """A node's agent (or its connection) moved to another state."""

    node: str
    state: NodeState
    exit_code: int | None = None
    detail: str = ""

    kind = "node"


@dataclass(frozen=True)
class AllocationChanged(Event):
    """The allocation (a Slurm job, a set of SSH hosts) changed: requested, pending, granted..."""

    state: str
    job_id: str | None = None
    nodes: tuple[str, ...] = ()
    detail: str = ""

    kind = "allocation"


@dataclass(frozen=True)
class PlanReady(Event):
    """The exact command every node runs, known once the nodes and the port are."""

    run_id: str
    rdzv_endpoint: str
    commands: tuple[tuple[str, str], ...]  # (node, shell line)

    kind = "plan"


@dataclass(frozen=True)
class TeardownReport(Event):
    """Proof for one node that nothing of the job is left running there."""

    node: str
    clean: bool
    leftover_pids: tuple[int, ...] = ()
    detail: str = ""

    kind = "teardown"


@dataclass(frozen=True)
class Notice(Event):
    """A message for the operator: progress on a long wait, a warning, an error."""

    level: str
    message: str

    kind = "notice"


@dataclass(frozen=True)
class RankSummary:
    rank: int | None
    node: str
    local_rank: int
    state: RankState
    exit_code: int | None
    error: str = ""
    traceback: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunSummary(Event):
    """The last event of a run: its outcome and where its records are."""

    ok: bool
    world_size: int
    ranks: tuple[RankSummary, ...]
    run_dir: str
    run_id: str
    detail: str = ""
    detached: bool = False
    stopped_by: str = "finished"  # finished | failure | operator | detached | error

    kind = "summary"

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["ranks"] = [
            {
                "rank": r.rank,
                "node": r.node,
                "local_rank": r.local_rank,
                "state": r.state.value,
                "exit_code": r.exit_code,
                "error": r.error,
                "traceback": list(r.traceback),
            }
            for r in self.ranks
        ]
        return data
