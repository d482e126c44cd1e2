"""Provides what Slurm is asked about jobs, steps and nodes: the answers' types and SlurmQuery.

Both ways of asking, the CLI (`cli.CliQuery`) and pyslurm (`pyslurm_query.PyslurmQuery`),
answer in these types, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# Job states after which nothing of the job runs (COMPLETING is a flag: still cleaning up).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
    }
)


@dataclass(frozen=True)
class JobInfo:
    """One job as squeue reports it; `states` holds the base state and any flags."""

    job_id: str
    name: str
    states: tuple[str, ...]
    reason: str = ""
    nodes: str = ""
    cpus: int = 0
    node_count: int = 0
    exit_code: int | None = None
    restarts: int = 0  # how often Slurm requeued it (the same job id, run again)

    @property
    def state(self) -> str:
        return "+".join(self.states)

    @property
    def pending(self) -> bool:
        return "PENDING" in self.states

    @property
    def running(self) -> bool:
        return "RUNNING" in self.states and "COMPLETING" not in self.states

    @property
    def ended(self) -> bool:
        """Nothing of the job is left: a final state and no longer completing."""
        if "COMPLETING" in self.states or any(s.startswith("REQUEUE") for s in self.states):
            return False  # a requeued job runs again under the same id
        return any(s in FINAL_STATES for s in self.states)

    @property
    def cpus_per_node(self) -> int:
        return self.cpus // self.node_count if self.node_count else 0


@dataclass(frozen=True)
class StepInfo:
    step_id: str
    name: str
    nodes: str = ""


def job_states(value: Any) -> tuple[str, ...]:
    """`job_state` is a string in Slurm 22.05 (`"RUNNING"`) and a list in newer releases
    (`["CANCELLED", "COMPLETING"]`)."""
    if isinstance(value, str):
        return tuple(s for s in value.replace("+", ",").split(",") if s)
    if isinstance(value, (list, tuple)):
        return tuple(str(s) for s in value)
    return ()


class SlurmQuery(Protocol):
    """The state queries the backend needs; every answer is fresh from the controller."""

    name: str

    async def job(self, job_id: str) -> JobInfo | None:
        """The job, or None once the controller has forgotten it."""

    async def steps(self, job_id: str) -> list[StepInfo]:
        """The job's running steps (none once the job is gone)."""

    async def hostnames(self, nodelist: str) -> list[str]:
        """A hostlist expression (`node[1-3]`) expanded, in Slurm's node order."""

    async def node_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        """Each node's NodeAddr: the address the other nodes reach it at."""
