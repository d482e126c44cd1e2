"""Provides PyslurmQuery: SlurmQuery answered through pyslurm's API instead of the CLI.

Chosen by `cli.choose_query()` only when pyslurm imports and was built for the running
Slurm. PyPI's pyslurm binds exactly one Slurm release (25.11 today), so on Debian's 22.05 —
the Slurm this project's tests run — it is never chosen and this module is not exercised by
the suite. It covers the read-only queries only; jobs are still started and cancelled with
salloc/sbatch/srun/scancel, which are the same on every release.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import hostlist

from ddptui.core.backends.slurm.query import JobInfo, StepInfo, job_states


def pyslurm_version() -> tuple[int, int] | None:
    """The Slurm release pyslurm was built for, or None if pyslurm does not import."""
    try:
        import pyslurm
    except Exception:  # a mismatched build raises at import time, not only ImportError
        return None
    api = getattr(pyslurm, "slurm_api_version", None)
    if callable(api):
        major, minor, *_ = api()
        return int(major), int(minor)
    parts = str(getattr(pyslurm, "__version__", "")).split(".")
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 and parts[1].isdigit() else None


class PyslurmQuery:
    """SlurmQuery through pyslurm (>= 23.x object API); blocking calls run in a thread."""

    name = "pyslurm"

    async def job(self, job_id: str) -> JobInfo | None:
        return await asyncio.to_thread(self._job, job_id)

    @staticmethod
    def _job(job_id: str) -> JobInfo | None:
        import pyslurm

        try:
            job: Any = pyslurm.Job.load(int(job_id))
        except pyslurm.RPCError:
            return None
        return JobInfo(
            job_id=str(job.id),
            name=job.name or "",
            states=job_states(job.state),
            reason="" if job.state_reason in (None, "None") else str(job.state_reason),
            nodes=job.allocated_nodes or "",
            cpus=job.cpus or 0,
            node_count=job.num_nodes or 0,
            exit_code=job.exit_code,
        )

    async def steps(self, job_id: str) -> list[StepInfo]:
        return await asyncio.to_thread(self._steps, job_id)

    @staticmethod
    def _steps(job_id: str) -> list[StepInfo]:
        import pyslurm

        try:
            steps: Any = pyslurm.JobSteps.load(int(job_id))
        except pyslurm.RPCError:
            return []
        return [
            StepInfo(f"{job_id}.{s.id}", s.name or "", s.allocated_nodes or "")
            for s in steps.values()
        ]

    async def hostnames(self, nodelist: str) -> list[str]:
        names: list[str] = hostlist.expand_hostlist(nodelist)
        return names

    async def node_addresses(self, nodes: Sequence[str]) -> dict[str, str]:
        return await asyncio.to_thread(self._addresses, list(nodes))

    @staticmethod
    def _addresses(nodes: list[str]) -> dict[str, str]:
        import pyslurm

        return {name: pyslurm.Node.load(name).address or name for name in nodes}
