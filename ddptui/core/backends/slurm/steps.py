"""Provides SlurmSteps: a Slurm job as the console holds it, what runs on its nodes, and how
its steps end and are proven gone.

The base of SlurmBackend, apart so that each file holds one role: this one the job's state,
the node helper run on a node by srun, the one step that starts every node's torchrun, the
GPU sampler's step while nodes are followed, and teardown (SIGTERM to the step's tasks
first, then the proof on every node from one step inside the job's own allocation, a node it
missed on its own; sbatch: the batch script's last step).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ddptui.core.backends.base import REAP_GRACE_S, Emit, HelperBackend, reap_args
from ddptui.core.backends.slurm.allocator import SlurmAllocator
from ddptui.core.backends.slurm.batch_end import BatchEnd
from ddptui.core.backends.slurm.cli import SlurmError, choose_query
from ddptui.core.backends.slurm.commands import (
    STEP_LOG,
    direct_tag,
    every_node_argv,
    job_name,
    node_tag,
    nodes_step_argv,
    step_name,
)
from ddptui.core.backends.slurm.follow import reap_all, reap_report, run_job_helper
from ddptui.core.backends.slurm.gpu_follow import LabelledGpu, NodeGpuFollow
from ddptui.core.backends.slurm.query import JobInfo
from ddptui.core.backends.transport import LocalTransport, Transport
from ddptui.core.events import AllocationChanged, TeardownReport
from ddptui.core.job.plan import NodeCommand, NodeTarget
from ddptui.core.job.spec import JobSpec
from ddptui.core.node import JOB_LINE, step_task_source, with_job
from ddptui.core.runs.run_dir import RunDir


class SlurmSteps(HelperBackend):
    """A Slurm job's state, the node helper on its nodes, and the end of its steps."""

    def __init__(self, spec: JobSpec, run: RunDir, emit: Emit) -> None:
        super().__init__(spec, run, emit)
        self.mode: str = spec.slurm.mode  # "auto": resolved by allocate(), or restore()
        self.direct = spec.slurm.launch == "srun"
        self.query = choose_query()
        self.alloc = SlurmAllocator(self.query, emit, job_name(run.run_id))
        self._transport = LocalTransport()
        self.job_id: str | None = None
        self.nodes: list[NodeTarget] = []
        self.cpus_per_node = 0
        self.cwd = spec.workdir or os.getcwd()
        self._ifnames: dict[str, str] = {}
        self._port_problem = ""
        self._once: dict[str, asyncio.Future[Any]] = {}
        self._told_batch_output = False
        self._complaints: set[str] = set()
        self._step_nodes: dict[str, dict[str, Any]] = {}  # the one step's table (step.py)
        self._gpu_step: NodeGpuFollow | None = None  # every node's sampler, while followed
        self._gpu_users = 0
        self._gpu_tools: dict[str, bool] = {}  # the probe's word: may the node have a GPU

    # -- plumbing ---------------------------------------------------------------------------------

    def transport(self, node: str) -> Transport:
        return self._transport

    def python(self) -> str:
        return sys.executable  # the shim's start/reap verbs run here, on the console's host

    async def _one_time(self, key: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """Actions every node asks for but that must happen once (one step for all nodes)."""
        if key not in self._once:
            self._once[key] = asyncio.ensure_future(make())
        return await asyncio.shield(self._once[key])

    async def _helper(
        self, node: str, verb: str, *args: str, inside: bool = True, source: bytes | None = None
    ) -> dict[str, Any]:
        name = f"{job_name(self.run.run_id)}-{verb}"
        job_id = self.job_id if inside else None
        shim = source or self._helper_source
        return await run_job_helper(self.spec, shim, name, node, job_id, verb, *args)

    # -- one step for every node ------------------------------------------------------------

    async def _start_step(self, first: NodeCommand) -> None:
        """Every node's torchrun in one step (a task per node, node/step.py), started
        detached by the node helper here, which splits its stream into each node's log and
        exit file (those files are what `follow` reads, as for a step per node)."""
        assert self.job_id is not None
        names = [n.name for n in self.nodes]
        argv = nodes_step_argv(
            self.spec, self.job_id, self.run.run_id, names, self.cpus_per_node, self.cwd
        )
        tag = direct_tag(self.run.run_id)
        step = NodeCommand(first.node, first.address, first.index, tuple(argv), {}, None, tag=tag)
        await super().start(step)
        launch = self._launches.pop(step.node, None)
        if launch is not None:  # its tail of the step's own log is not needed
            await launch.close()

    def start_checks(self, command: NodeCommand) -> dict[str, Any]:
        """The one step's split: each node's task, log and order (node/step.py)."""
        if self.direct or command.tag != direct_tag(self.run.run_id):
            return {}
        logs = {n.name: str(self.run.node_log(i, n.name)) for i, n in enumerate(self.nodes)}
        return {
            "split": {
                "nodes": self._step_nodes,
                "logs": logs,
                "order": [n.name for n in self.nodes],
                "program": base64.b64encode(step_task_source()).decode(),
                "job_line": JOB_LINE.decode(),
            }
        }

    # -- the GPU sampler step ---------------------------------------------------------------

    async def _gpu_join(self) -> None:
        """The GPU sampler, one step with a task per node beside the job's, runs while any
        node is followed (gpu_follow.py)."""
        if not self.spec.gpu_sample_ms or self.job_id is None:
            return
        nodes = [n for n in self.nodes if self._gpu_tools.get(n.name, True)]
        if not nodes:
            return  # the probe found no GPU (nor nvidia-smi) on any node: nothing to sample
        self._gpu_users += 1
        if self._gpu_step is None:
            self._gpu_step = self._gpu_follow(nodes)
            await self._gpu_step.start()

    async def _gpu_leave(self) -> None:
        if self._gpu_step is None:
            return
        self._gpu_users -= 1
        if self._gpu_users <= 0:
            step, self._gpu_step = self._gpu_step, None
            await step.stop()

    def _gpu_follow(self, nodes: Sequence[NodeTarget]) -> NodeGpuFollow:
        assert self.job_id is not None
        names = [n.name for n in nodes]
        name = f"{job_name(self.run.run_id)}-gpu"
        argv = every_node_argv(
            self.job_id, names, name, self.spec.python, "each", "gpu", label=True
        )
        ms, tasks = str(self.spec.gpu_sample_ms), "slurm" if self.direct else ""
        table = {
            n.name: [node_tag(self.run.run_id, i, self.direct), ms, "", tasks]
            for i, n in enumerate(self.nodes)
            if n.name in names
        }
        program = with_job(self._helper_source, {"nodes": table})
        demux = LabelledGpu(names, self.gpu_sample)
        return NodeGpuFollow(argv, program, lambda _: None, demux)

    # -- teardown ---------------------------------------------------------------------------------

    async def reap(self, command: NodeCommand) -> TeardownReport:
        """End the node's part of the job, then prove on the node, inside the job's own
        allocation, that nothing is left (sbatch: the batch script's last step proves it)."""
        if self.job_id is None:
            return TeardownReport(command.node, True, (), "no job was started")
        if self.mode == "sbatch":
            return await self._reap_batch(command)
        # One step runs every node (srun direct, or a task per node: node/step.py).
        names = [step_name(self.run.run_id)]
        gone = await self._one_time("end-step", lambda: self._end_steps(names))
        ended = "step ended" if gone else "step still listed by squeue"
        tag = direct_tag(self.run.run_id)  # the srun client's, on this machine
        local = await self._one_time("local", lambda: self._reap_here(tag))
        # squeue's word and every node's proof at once (the proof step fails by itself in an
        # allocation that has ended)
        job, reports = await asyncio.gather(
            self._one_time("job-now", self._job_now), self._one_time("reap-all", self._reap_all)
        )
        if job is None or job.ended:
            state = job.state if job is not None else "gone from squeue"
            # Proving it with a new job could wait for hours on a busy cluster: not done.
            return TeardownReport(
                command.node,
                False,
                tuple(local),
                f"{ended}; allocation {self.job_id} ended ({state}) before the check: "
                f"nothing on {command.node} could be checked inside it",
            )
        try:
            report = reports.get(command.node)
            if report is None:  # the one step missed it: on its own, to tell why
                before = self.gpu_before.get(command.node, "")
                args = reap_args(self.spec, command.tag, before)
                report = await self._helper(command.node, "reap", *args)
        except SlurmError as exc:
            return TeardownReport(
                command.node, False, tuple(local), f"{ended}; could not check {command.node}: {exc}"
            )
        return reap_report(command.node, ended, report, local)

    async def _reap_all(self) -> dict[str, dict[str, Any]]:
        """Every node's proof from one `srun --overlap` step (a task per node, each with its
        own tag and GPU level); {} when that step could not run at all."""
        run_id, before = self.run.run_id, self.gpu_before
        args = {
            n.name: reap_args(self.spec, node_tag(run_id, i, self.direct), before.get(n.name, ""))
            for i, n in enumerate(self.nodes)
        }
        name = f"{job_name(self.run.run_id)}-reap"
        with contextlib.suppress(SlurmError):
            return await reap_all(self.spec, name, self.job_id or "", args)
        return {}

    async def _reap_batch(self, command: NodeCommand) -> TeardownReport:
        end = BatchEnd(
            self.alloc, self.query, self.run, self.job_id or "", self.emit, self._end_steps
        )
        nodes = [n.name for n in self.nodes]
        if self.direct:
            exits = [self.run.path / f"{STEP_LOG}.exit"]
        else:
            exits = [Path(f"{self.run.node_log(i, n)}.exit") for i, n in enumerate(nodes)]
        trained = all(p.exists() for p in exits)  # its step may still be listed: not stopped
        how = await self._one_time("end-job", lambda: end.finish(nodes, stop=not trained))
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
            return await self.query.job(self.job_id or "")
        except SlurmError:
            return JobInfo(self.job_id or "", "", ("RUNNING",))

    async def _end_steps(self, names: Sequence[str]) -> bool:
        """SIGTERM the steps' tasks first, as the SSH backend does (torchrun stops its workers,
        a script may checkpoint); scancel (SIGKILL for a step) what is left after the grace."""
        assert self.job_id is not None
        steps: list[str] = []
        with contextlib.suppress(SlurmError):
            steps = [s.step_id for s in await self.query.steps(self.job_id) if s.name in names]
        for step in steps:
            await self.alloc.signal(step, "TERM")
        if await self.alloc.wait_steps_gone(self.job_id, names, timeout=REAP_GRACE_S):
            return True
        for step in steps:
            await self.alloc.cancel(step)
        return await self.alloc.wait_steps_gone(self.job_id, names)

    async def _reap_here(self, tag: str) -> list[int]:
        """The srun client this console started for the node (tagged too), if it lingers."""
        if self.mode == "sbatch":
            return []
        with contextlib.suppress(IndexError, ValueError):
            return list((await self.reap_tag(self._transport, tag))["leftover"])
        return []

    async def release(self) -> None:
        if self.job_id is None:
            return
        if self.mode != "existing":
            await self.alloc.release(self.job_id)
            return
        prefix = job_name(self.run.run_id)
        with contextlib.suppress(SlurmError):
            ours = [
                s.name for s in await self.query.steps(self.job_id) if s.name.startswith(prefix)
            ]
            if ours:
                await self._end_steps(ours)
        self._announce("kept", "your allocation is left running; ddptui's steps are gone")

    async def detach(self) -> None:
        if self.job_id is not None:
            self._announce("detached", f"the job runs on: ddptui attach {self.run.run_id}")

    def _announce(self, state: str, detail: str) -> None:
        self.emit(AllocationChanged(state, self.job_id, tuple(n.name for n in self.nodes), detail))
