"""Provides SlurmJob: a Slurm job as the console holds it (how it was had, its id, its nodes).

Held by SlurmBackend and shared with what it composes (SlurmTeardown), so the job's state
has one owner and no class inherits another to reach it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ddptui.core.job.plan import NodeTarget


@dataclass
class SlurmJob:
    """The job's state as allocate(), restore() or a requeue leave it."""

    mode: str  # "salloc", "existing", "sbatch" ("auto" until allocate() resolves it)
    direct: bool  # srun runs the script itself (no torchrun)
    cwd: str
    job_id: str | None = None
    nodes: list[NodeTarget] = field(default_factory=list)
    cpus_per_node: int = 0
    _once: dict[str, asyncio.Future[Any]] = field(default_factory=dict, repr=False)

    async def once(self, key: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """Actions every node asks for but that must happen once (one step for all nodes)."""
        if key not in self._once:
            self._once[key] = asyncio.ensure_future(make())
        return await asyncio.shield(self._once[key])

    def forget(self, *keys: str) -> None:
        """Let those actions happen again (a requeued job starts a new cycle)."""
        for key in keys:
            self._once.pop(key, None)
