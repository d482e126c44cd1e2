"""Provides BatchEnd: the end of an sbatch job, proven inside its own allocation.

A new job to check the nodes can wait in the queue for hours on a busy cluster, and cannot
land on a drained node at all, so the batch script's own last step runs ddptui's node helper
on every node (commands.py: `prove_node`) and writes each node's report beside its log. To
tear the job down, the console stops the job's training step (SIGTERM, then scancel of that
step only), lets the script run its last step, and reads the proofs; the job then ends by
itself. scancel of the whole job is only for a job still pending, or one whose last step
hangs. How the job ended is said in Slurm's words (its state and exit code).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ddptui.core.backends.slurm.allocator import SlurmAllocator
from ddptui.core.backends.slurm.batch_script import PROOF_SUFFIX
from ddptui.core.backends.slurm.cli import SlurmError
from ddptui.core.backends.slurm.commands import step_name
from ddptui.core.backends.slurm.query import JobInfo, SlurmQuery
from ddptui.core.events import AllocationChanged, Event
from ddptui.core.runs.run_dir import RunDir

PROOF_WAIT_S = 90.0  # the last step starts once the training step is gone; srun + python
POLL_S = 0.25


class BatchEnd:
    """Ends one sbatch job once, and hands out each node's proof."""

    def __init__(
        self,
        alloc: SlurmAllocator,
        query: SlurmQuery,
        run: RunDir,
        job_id: str,
        emit: Callable[[Event], None],
        end_steps: Callable[[Sequence[str]], Awaitable[bool]],
    ) -> None:
        self.alloc = alloc
        self.query = query
        self.run = run
        self.job_id = job_id
        self.emit = emit
        self.end_steps = end_steps

    def proof_path(self, index: int, node: str) -> Path:
        log = self.run.node_log(index, node)
        return log.with_name(log.name.removesuffix(".log") + PROOF_SUFFIX)

    def proof(self, index: int, node: str) -> dict[str, Any] | None:
        """The node's report from the job's last step, None if it never ran there."""
        with contextlib.suppress(OSError, ValueError):
            report: dict[str, Any] = json.loads(self.proof_path(index, node).read_text())
            return report
        return None

    async def _job(self) -> JobInfo | None:
        with contextlib.suppress(SlurmError):
            return await self.query.job(self.job_id)
        return None

    async def finish(self, nodes: Sequence[str], stop: bool = True) -> str:
        """End the job and say how it ended, e.g. `job 12 finished by itself (COMPLETED,
        exit 0)` or `job 12 ended after ddptui stopped its training step (COMPLETED)`.
        `stop` False: every node's training has ended already (its exit file is written),
        so the step is left to finish by itself."""
        job = await self._job()
        jid = self.job_id
        if job is None:
            return f"job {jid} had already left squeue"
        if job.pending:
            await self.alloc.release(jid, "cancelled while pending: ")
            return f"job {jid} was still pending ({job.reason}): cancelled, nothing ran"
        how = "finished by itself"
        if not job.ended:
            names = [step_name(self.run.run_id)]
            with contextlib.suppress(SlurmError):
                if stop and any(s.name in names for s in await self.query.steps(jid)):
                    await self.end_steps(names)
                    how = "ended after ddptui stopped its training step"
            await self._wait_proofs(nodes)
            if not await self._wait_ended(30.0):
                await self.alloc.release(jid)
                how += "; its last step hung: scancel"
        final = await self._job()
        state = final.state if final is not None else "gone from squeue"
        code = (
            f", exit {final.exit_code}" if final is not None and final.exit_code is not None else ""
        )
        detail = f"job {jid} {how} ({state}{code})"
        if jid not in self.alloc.released:
            self.alloc.released.add(jid)
            self.emit(AllocationChanged("released", jid, (), detail))
        return detail

    async def _wait_proofs(self, nodes: Sequence[str]) -> None:
        """Until every node's proof is written, or the job has ended without one."""
        deadline = time.monotonic() + PROOF_WAIT_S
        while time.monotonic() < deadline:
            if all(self.proof_path(i, n).exists() for i, n in enumerate(nodes)):
                return
            job = await self._job()
            if job is None or job.ended:
                return
            await asyncio.sleep(POLL_S)

    async def _wait_ended(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = await self._job()
            if job is None or job.ended:
                return True
            await asyncio.sleep(POLL_S)
        return False
