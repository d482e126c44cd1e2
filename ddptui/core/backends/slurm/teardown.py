"""Provides SlurmTeardown: how a Slurm job's steps end and every node is proven clean.

SIGTERM to the step's tasks first; each task proves its own node once its command has
ended, and a node without that proof gets it from one step inside the job's own allocation
(a node that step missed, on its own); sbatch: the batch script's last step proves it. The
allocation is given back last (an allocation the console runs in is kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ddptui.core.backends.base import Emit, reap_args
from ddptui.core.backends.slurm.allocator import SlurmAllocator
from ddptui.core.backends.slurm.batch_end import BatchEnd
from ddptui.core.backends.slurm.cli import SlurmError
from ddptui.core.backends.slurm.commands import (
    STEP_LOG,
    direct_tag,
    job_name,
    node_tag,
    step_name,
)
from ddptui.core.backends.slurm.follow import reap_all, reap_report
from ddptui.core.backends.slurm.job import SlurmJob
from ddptui.core.backends.slurm.query import JobInfo, SlurmQuery
from ddptui.core.events import AllocationChanged, TeardownReport
from ddptui.core.job.plan import NodeCommand, node_container
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.run_dir import RunDir

NodeHelper = Callable[..., Awaitable[dict[str, Any]]]  # (node, verb, *args) -> its report
STEP_PROVED = "step ended; its task looked once its command had ended"
STEP_END_S = 5.0  # a step whose tasks' processes are all gone is gone from squeue by then
POLL_S = 0.05
DEFAULT_GRACE_S = 3.0  # JobSpec.grace's default: up to it, Slurm's own SIGTERM stops the step
HereReap = Callable[[str], Awaitable[list[int]]]  # tag -> PIDs left on the console's host


class SlurmTeardown:
    """Ends the job's steps once, proves each node clean, and gives the allocation back."""

    def __init__(
        self,
        job: SlurmJob,
        spec: JobSpec,
        run: RunDir,
        alloc: SlurmAllocator,
        query: SlurmQuery,
        emit: Emit,
        helper: NodeHelper,
        reap_here: HereReap,
        gpu_before: dict[str, str],
    ) -> None:
        self.job = job
        self.spec = spec
        self.run = run
        self.alloc = alloc
        self.query = query
        self.emit = emit
        self.helper = helper
        self.reap_here = reap_here
        self.gpu_before = gpu_before  # the backend's, filled while nodes are followed

    async def reap(self, command: NodeCommand, lost: bool = False) -> TeardownReport:
        """End the node's part of the job, then prove on the node, inside the job's own
        allocation, that nothing is left (sbatch: the batch script's last step proves it).
        `lost`: this node alone, the others running on (the operator's kill or drain)."""
        job = self.job
        if job.job_id is None:
            return TeardownReport(command.node, True, (), "no job was started")
        if lost:
            before = self.gpu_before.get(command.node, "")
            try:
                report = await self.helper(
                    command.node, "reap", *reap_args(self.spec, command.tag, before, lost=True)
                )
            except SlurmError as exc:
                return TeardownReport(command.node, False, (), f"could not stop it: {exc}")
            return reap_report(command.node, "its agent stopped", report, ())
        if job.mode == "sbatch":
            return await self._reap_batch(command)
        # One step runs every node (srun direct, or a task per node: node/step.py).
        # A graceful stop (stop signals other than TERM, or a longer grace): every node's
        # reap, in one step inside the allocation, stops the workers (the stop signals to
        # each worker, the agents left to end on their own, SIGKILL after the grace) and
        # proves the node clean; the job step then ends with its tasks. Otherwise Slurm's
        # own SIGTERM to every process of the step first (slurmstepd knows them: no node
        # looks through its processes twice, which at 64 nodes was the slower way); each
        # task of the step then proves its own node once its command has ended (a look at
        # every process for the node's tag: step_task.sh), so once the step's srun client
        # has exited, no further step is needed for them. A node without that proof (its
        # task killed, a process of the job still there, a GPU or a container to prove)
        # gets the reap step, squeue's word asked beside it (the step fails by itself in
        # an allocation that has ended).
        gone = "" if self.graceful else await job.once("end-step", self._step_gone)
        proven = gone == "srun"
        proof = self._step_proof(command.index, command.node, command.tag) if proven else None
        if proof is not None:
            return reap_report(command.node, STEP_PROVED, proof, ())
        now, reports = await asyncio.gather(
            job.once("job-now", self._job_now),
            job.once("reap-all", lambda: self._reap_all(proven)),
        )
        if self.graceful:
            gone = await job.once("end-step", self._step_gone)
        ended = "step ended" if gone else "step still listed by squeue"
        tag = direct_tag(self.run.run_id)  # the srun client's, on this machine
        local = [] if gone == "srun" else await job.once("local", lambda: self._reap_here(tag))
        if now is None or now.ended:
            state = now.state if now is not None else "gone from squeue"
            # Proving it with a new job could wait for hours on a busy cluster: not done.
            return TeardownReport(
                command.node,
                False,
                tuple(local),
                f"{ended}; allocation {job.job_id} ended ({state}) before the check: "
                f"nothing on {command.node} could be checked inside it",
            )
        try:
            report = reports.get(command.node)
            if report is None:  # the one step missed it: on its own, to tell why
                before = self.gpu_before.get(command.node, "")
                args = reap_args(self.spec, command.tag, before)
                report = await self.helper(command.node, "reap", *args)
        except SlurmError as exc:
            return TeardownReport(
                command.node, False, tuple(local), f"{ended}; could not check {command.node}: {exc}"
            )
        return reap_report(command.node, ended, report, local)

    @property
    def graceful(self) -> bool:
        """Whether the workers get the stop signals from the reaper (see reap)."""
        return self.spec.stop_signals != ("TERM",) or self.spec.grace > DEFAULT_GRACE_S

    async def _step_gone(self) -> str:
        """The job step over: its srun client on this machine has exited once its tasks have
        (its supervisor writes the step log's exit file after srun's end; "srun": no srun
        client is left to look for), else as squeue says ("squeue"), stopped and scancelled if
        need be; "" while squeue still lists it."""
        exit_file = self.run.path / f"{STEP_LOG}.exit"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STEP_END_S
        if not self.graceful:  # Slurm's SIGTERM to every process of the step
            await self._signal_step(self.spec.stop_signals)
            deadline += self.spec.grace
        while loop.time() < deadline:
            if await asyncio.to_thread(exit_file.exists):
                return "srun"
            await asyncio.sleep(POLL_S)
        return "squeue" if await self.end_steps([step_name(self.run.run_id)]) else ""

    def _step_proof(self, index: int, node: str, tag: str) -> dict[str, Any] | None:
        """The node's proof from its task of the one step (LOG.proof, node/step.py), where
        it is the whole proof: not for srun direct (no such task), a node that may have a
        GPU (its memory's return is proven by the reaper), or a container to remove."""
        if self.job.direct or self.graceful or node_container(self.spec, tag):
            return None
        log = str(self.run.node_log(index, node))
        try:
            if Path(log + ".gpu").read_text().strip() != "0":
                return None
            report: dict[str, Any] = json.loads(Path(log + ".proof").read_text())
        except (OSError, ValueError):
            return None
        return report

    async def _reap_here(self, tag: str) -> list[int]:
        """The srun client this console started for the node (tagged too), if it lingers."""
        if self.job.mode == "sbatch":
            return []
        return await self.reap_here(tag)

    async def _reap_all(self, proven: bool) -> dict[str, dict[str, Any]]:
        """Every node's proof from one `srun --overlap` step (a task per node, each with its
        own tag and GPU level), but those its task of the job's step proved (`proven`: that
        step's srun client has exited, see _step_proof); {} when that step could not run
        at all, or had no node to prove."""
        run_id, before, direct = self.run.run_id, self.gpu_before, self.job.direct
        tags = {n.name: node_tag(run_id, i, direct) for i, n in enumerate(self.job.nodes)}
        args = {
            n.name: reap_args(self.spec, tags[n.name], before.get(n.name, ""))
            for i, n in enumerate(self.job.nodes)
            if not (proven and self._step_proof(i, n.name, tags[n.name]))
        }
        if not args:
            return {}
        name = f"{job_name(self.run.run_id)}-reap"
        with contextlib.suppress(SlurmError):
            return await reap_all(self.spec, name, self.job.job_id or "", args)
        return {}

    async def _reap_batch(self, command: NodeCommand) -> TeardownReport:
        job_id = self.job.job_id or ""
        end = BatchEnd(
            self.alloc,
            self.query,
            self.run,
            job_id,
            self.emit,
            lambda names: self.end_steps(names, signal=True),
        )
        nodes = [n.name for n in self.job.nodes]
        if self.job.direct:
            exits = [self.run.path / f"{STEP_LOG}.exit"]
        else:
            exits = [Path(f"{self.run.node_log(i, n)}.exit") for i, n in enumerate(nodes)]
        trained = all(p.exists() for p in exits)  # its step may still be listed: not stopped
        how = await self.job.once("end-job", lambda: end.finish(nodes, stop=not trained))
        proof = end.proof(command.index, command.node)
        if proof is None:
            return TeardownReport(
                command.node,
                False,
                (),
                f"{how}; no proof from {command.node}: the job ended before its last step "
                "ran there",
            )
        return reap_report(command.node, f"{how}; its last step checked {command.node}", proof, [])

    async def _job_now(self) -> JobInfo | None:
        """The job as squeue has it now (a time limit may have ended it); a failed query
        counts as alive, so the check is tried."""
        try:
            return await self.query.job(self.job.job_id or "")
        except SlurmError:
            return JobInfo(self.job.job_id or "", "", ("RUNNING",))

    async def _signal_step(self, signals: Sequence[str]) -> None:
        job_id = self.job.job_id or ""
        names = [step_name(self.run.run_id)]
        with contextlib.suppress(SlurmError):
            for step in [s.step_id for s in await self.query.steps(job_id) if s.name in names]:
                for name in signals:
                    await self.alloc.signal(step, name)

    async def end_steps(self, names: Sequence[str], signal: bool = False) -> bool:
        """The steps gone: once the reap step has stopped their tasks they end by themselves
        (a short wait); else, and with `signal` first, the stop signals to the steps' tasks
        (Slurm sends them to every process of the step: the agents ignore USR1/USR2, see
        step_task.sh) and the grace; scancel (SIGKILL for a step) what is left."""
        job_id = self.job.job_id
        assert job_id is not None
        steps: list[str] = []
        with contextlib.suppress(SlurmError):
            steps = [s.step_id for s in await self.query.steps(job_id) if s.name in names]
        if not steps:
            return True
        if not signal and await self.alloc.wait_steps_gone(job_id, names, timeout=STEP_END_S):
            return True
        for step in steps:
            for name in self.spec.stop_signals:
                await self.alloc.signal(step, name)
        if await self.alloc.wait_steps_gone(job_id, names, timeout=self.spec.grace):
            return True
        for step in steps:
            await self.alloc.cancel(step)
        return await self.alloc.wait_steps_gone(job_id, names)

    async def release(self) -> None:
        job_id = self.job.job_id
        if job_id is None:
            return
        if self.job.mode != "existing":
            await self.alloc.release(job_id)
            return
        prefix = job_name(self.run.run_id)
        with contextlib.suppress(SlurmError):
            ours = [s.name for s in await self.query.steps(job_id) if s.name.startswith(prefix)]
            if ours:
                await self.end_steps(ours, signal=True)
        self.announce("kept", "your allocation is left running; ddptui's steps are gone")

    def announce(self, state: str, detail: str) -> None:
        names = tuple(n.name for n in self.job.nodes)
        self.emit(AllocationChanged(state, self.job.job_id, names, detail))
