"""Provides the typed events a session emits: the one vocabulary of the UI and headless mode."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar


class RankState(enum.StrEnum):
    """Where one rank is in its life, in the order a healthy rank passes through them."""

    PENDING = "pending"
    ASSIGNED = "assigned"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    HUNG = "hung"
    STOPPED = "stopped"  # ended by the operator's teardown: not a failure of the job
    RESTARTING = "restarting"  # its agent restarts the worker group: a new round will come

    @property
    def final(self) -> bool:
        return self in (RankState.DONE, RankState.FAILED, RankState.STOPPED)


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
    STOPPED = "stopped"  # its agent ended by the operator's teardown
    DETACHED = "detached"


class RunPhase(enum.StrEnum):
    """Where the whole run is: the words the console's outcome line and headless mode share."""

    NOT_LAUNCHED = "not launched"
    LAUNCHING = "launching"
    ATTACHING = "attaching"
    RUNNING = "running"
    STALLED = "stalled"
    TEARING_DOWN = "tearing down"
    DETACHING = "detaching"
    DETACHED = "detached"
    FINISHED = "finished"
    FAILED = "failed"
    TORN_DOWN = "torn down"
    CRASHED = "crashed"  # the console's own word: its session's process died

    @property
    def final(self) -> bool:
        return self in (
            RunPhase.DETACHED,
            RunPhase.FINISHED,
            RunPhase.FAILED,
            RunPhase.TORN_DOWN,
            RunPhase.CRASHED,
        )


class StopReason(enum.StrEnum):
    """Why a run ended: the one word the summary, history and the console read it by."""

    FINISHED = "finished"  # every rank ended by itself (ok or not: the summary's `ok` says)
    FAILURE = "failure"  # a rank or a node failed and the session stopped the rest
    OPERATOR = "operator"  # the operator's teardown
    DETACHED = "detached"  # the console let go; the job runs on
    ERROR = "error"  # the launch or the backend failed before the job could run


EVENT_KINDS: dict[str, type[Event]] = {}  # kind -> its class, filled as each is declared


def plain(value: Any) -> Any:
    """JSON-ready form of an event field: enums by value, nested records as dicts."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Diagnosis:
    """Something a rank's (or its agent's) output says went wrong, in one line.

    `kind` is one of diagnosis.KINDS; `seq` is the node line it was seen on (NodeLine.seq),
    so the console can jump to it.
    """

    kind: str
    summary: str
    line: str = ""
    seq: int | None = None
    ts: float = 0.0  # when the console read that line


@dataclass(frozen=True)
class FailureRecord:
    """One entry of torchrun's failure summary (ChildFailedError), as the agent printed it."""

    node: str
    rank: int | None
    local_rank: int
    exit_code: int
    signal: str | None = None
    host: str = ""
    time: str = ""  # torchrun's own format: 2026-11-26_04:21:49
    pid: int | None = None
    error_file: str = ""
    traceback: tuple[str, ...] = ()
    error: str = ""
    root_cause: bool = False  # the job's culprit: exactly one record of a run has it
    first_on_node: bool = False  # torchrun's "first observed failure" of its node
    cause: str = ""  # failures.cause_of: exception, stopped_by_launcher, peer_closed, ...


@dataclass(frozen=True)
class Event:
    """Base of every event; `ts` is wall-clock seconds when the console saw it.

    Each kind says, once, in its own class: its name (`kind`, the JSON line's "event"),
    whether the run's `events.jsonl` keeps it (`recorded`), and whether a console following
    the run from its directory reads it back (`followed`; the others it rebuilds from the
    nodes' logs). How the console receives it is said by the message that carries it
    (`ddptui/ui/messages.py`). Every kind is in `EVENT_KINDS` once its module is imported.
    """

    ts: float = field(default_factory=time.time, kw_only=True)

    kind: ClassVar[str] = "event"
    recorded: ClassVar[bool] = True
    followed: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        EVENT_KINDS[cls.kind] = cls

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"event": self.kind}
        for f in dataclasses.fields(self):
            data[f.name] = plain(getattr(self, f.name))
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
    seq: int = 0  # the line's number in its node's output (1-based; 0: not numbered)

    kind = "line"
    recorded = False  # the nodes' own logs keep every line


@dataclass(frozen=True)
class NodeLines(Event):
    """A run of one node's output lines as it arrived, in order: the form the session emits.

    `lines` holds (text, rank, local_rank) for each line (rank None: the agent's own or
    unprefixed output); the i-th line's seq is `first_seq + i`. One event a chunk, not one a
    line, so a node printing 100k lines/s costs the console a few events a second.
    """

    node: str
    lines: Sequence[tuple[str, int | None, int | None]]
    first_seq: int = 1

    kind = "lines"
    recorded = False  # the nodes' own logs keep every line

    def each(self) -> Iterator[NodeLine]:
        """The lines one by one, as NodeLine events."""
        node, seq, ts = self.node, self.first_seq, self.ts
        for offset, (text, rank, local_rank) in enumerate(self.lines):
            yield NodeLine(node, text, rank, local_rank, seq + offset, ts=ts)


@dataclass(frozen=True)
class RankChanged(Event):
    """A rank moved to another state."""

    rank: int | None
    node: str
    local_rank: int
    state: RankState
    exit_code: int | None = None
    detail: str = ""
    diagnoses: tuple[Diagnosis, ...] = ()
    restarts: int = 0
    straggler: bool = False
    suspect: bool = False  # the stall's stacks single it out
    seq: int = 0  # the node's output line that made the change (NodeLine.seq; 0: none)

    kind = "rank"


@dataclass(frozen=True)
class NodeChanged(Event):
    """A node's agent (or its connection) moved to another state."""

    node: str
    state: NodeState
    exit_code: int | None = None
    detail: str = ""

    kind = "node"
    followed = True


# A FAILED node's detail when the node itself is gone, not only its agent: its connection
# lost (SSH), or its scheduler saying so (LOST_BY, then the scheduler's words).
CONNECTION_LOST = "connection lost"
LOST_BY = "lost: "


def lost_words(detail: str) -> str | None:
    """What a FAILED node's detail says of a node that is gone, else None."""
    if detail == CONNECTION_LOST:
        return "its connection was lost"
    return detail[len(LOST_BY) :] if detail.startswith(LOST_BY) else None


@dataclass(frozen=True)
class AllocationChanged(Event):
    """The allocation (a Slurm job, a set of SSH hosts) changed: requested, pending, granted..."""

    state: str
    job_id: str | None = None
    nodes: tuple[str, ...] = ()
    detail: str = ""
    restarts: int = 0  # `requeued`: how often Slurm has requeued the job (its restart count)

    kind = "allocation"
    followed = True


@dataclass(frozen=True)
class PlanReady(Event):
    """The exact command every node runs, known once the nodes and the port are."""

    run_id: str
    rdzv_endpoint: str
    commands: tuple[tuple[str, str], ...]  # (node, shell line)

    kind = "plan"


@dataclass(frozen=True)
class RendezvousAsked(Event):
    """The rendezvous a node's agent was started for, as it logged its launch configs: the
    world check compares it with the job's (core/session/world_check.py)."""

    node: str
    run_id: str
    endpoint: str
    min_nodes: int
    max_nodes: int

    kind = "rendezvous_asked"


@dataclass(frozen=True)
class WorldJoined(Event):
    """The world a node's agent got from the rendezvous (its result): how many nodes, how
    many workers, who is rank 0's host."""

    node: str
    group_rank: int
    nodes: int
    world_size: int
    master_addr: str

    kind = "world_joined"


@dataclass(frozen=True)
class GpuStat:
    """One GPU in one sample: what it does, and which of the job's ranks use it."""

    index: int
    util: int | None  # percent
    mem_used_mib: int | None
    mem_total_mib: int | None
    power_w: float | None
    temp_c: int | None
    ranks: tuple[int, ...] = ()
    uuid: str = ""
    sm_mhz: int | None = None
    throttle: tuple[str, ...] = ()  # why its clock is held down now: "power cap", "thermal"...

    @property
    def mem_ratio(self) -> float | None:
        if self.mem_used_mib is None or not self.mem_total_mib:
            return None
        return self.mem_used_mib / self.mem_total_mib


@dataclass(frozen=True)
class GpuFlag:
    """Something a rank's GPU says that its output does not: `busy_no_progress` (a kernel
    spins while the rank makes no progress: a collective waiting for a peer), `idle` (the rank
    runs, its GPU does nothing), `mem_high` (the GPU's memory is near its limit)."""

    kind: str
    gpu: int
    rank: int | None
    detail: str


@dataclass(frozen=True)
class GpuReport(Event):
    """A node's GPUs in one sample: `{"event": "gpu", "node", "gpus": [GpuStat...], "flags"}`."""

    node: str
    gpus: tuple[GpuStat, ...]
    flags: tuple[GpuFlag, ...] = ()

    kind = "gpu"
    followed = True


@dataclass(frozen=True)
class GpuHolder:
    pid: int  # a process of the job that still holds a GPU after teardown
    gpu: int | None
    mem_mib: int
    command: str


@dataclass(frozen=True)
class GpuProof:
    """A node's GPUs after teardown: none held by the job, memory back to its level before
    the job (`mem_before_mib`: the first sample's; empty without samples)."""

    clean: bool
    mem_used_mib: tuple[tuple[int, int], ...]  # (GPU index, MiB)
    mem_before_mib: tuple[tuple[int, int], ...] = ()
    held: tuple[GpuHolder, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class TeardownReport(Event):
    """Proof for one node that nothing of the job is left running there (and, on a node with
    GPUs, that no GPU is still held: `gpu`)."""

    node: str
    clean: bool
    leftover_pids: tuple[int, ...] = ()
    detail: str = ""
    gpu: GpuProof | None = None

    kind = "teardown"
    followed = True


@dataclass(frozen=True)
class Notice(Event):
    """A message for the operator: progress on a long wait, a warning, an error."""

    level: str
    message: str

    kind = "notice"
    followed = True


@dataclass(frozen=True)
class FailureReport(Event):
    """torchrun's failure summary named a failed worker (with host, time, error file...).

    `ordered` is every failure so far as the monitor tells the story (the culprit first);
    the console draws it as it is. It stays out of the JSON line: the summary carries it.
    """

    failure: FailureRecord
    ordered: tuple[FailureRecord, ...] = ()

    kind = "failure"

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.kind, "ts": self.ts, "failure": plain(self.failure)}


@dataclass(frozen=True)
class RankSummary:
    rank: int | None
    node: str
    local_rank: int
    state: RankState
    exit_code: int | None
    error: str = ""
    traceback: tuple[str, ...] = ()
    diagnoses: tuple[Diagnosis, ...] = ()
    restarts: int = 0
    cause: str = ""  # why it ended, if it failed (failures.cause_of); "" when it did not
    culprit: bool = False  # the rank the run's failure story starts with


@dataclass(frozen=True)
class PhaseChanged(Event):
    """The run moved to another phase (decided by the session: `core/session/phase.py`).

    `{"event": "phase", "phase": "running", "detail": ""}`; `detail` says more where the
    phase alone does not (a stall: "no rank progresses").
    """

    phase: RunPhase
    detail: str = ""

    kind = "phase"
    followed = True


def plain_number(value: float) -> float | str:
    """A number as JSON can hold it: NaN and the infinities spelled `"nan"`, `"inf"`, `"-inf"`
    (JSON has no such numbers, and for a loss they are the news)."""
    if math.isfinite(value):
        return value
    return "nan" if value != value else ("inf" if value > 0 else "-inf")


@dataclass(frozen=True)
class MetricSampled(Event):
    """What one rank's line reported: `{"event": "metric", "rank": R, "step": N, "values":
    {"loss": 1.23, "samples/s": 812.5}}` with canonical names (core/metrics/names.py).

    At most one a rank every `MetricReader.min_interval` (50 ms in a session): a rank that
    prints a metric at every one of thousands of steps a second is sampled, not copied.
    """

    rank: int
    step: int
    values: Mapping[str, float]

    kind = "metric"
    recorded = False  # the run's metrics.jsonl keeps them (RunDir.record_metric)

    def to_dict(self) -> dict[str, Any]:
        values = {name: plain_number(value) for name, value in self.values.items()}
        return {"event": self.kind, "ts": self.ts, "rank": self.rank, "step": self.step,
                "values": values}  # fmt: skip
