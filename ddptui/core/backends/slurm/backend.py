"""Provides the Slurm backend: torchrun (or the script itself) on nodes Slurm allocates.

Three ways to have nodes: `salloc --no-shell` (ours to release), the allocation the console
runs inside (SLURM_JOB_ID: left alone), or `sbatch` (the job runs without the console;
`ddptui attach` follows it again). Whatever the way, every node's output goes straight into
the run directory from a process that does not depend on the console, so following a node is
reading a local file, and a console that dies loses nothing.

- torchrun launch: one srun step for every node (`ddptui-RUN`, a task per node), started
  detached through the node shim, each task running its own node's torchrun line (each
  node's own `--local-addr`, so MASTER_ADDR never depends on DNS); the shim splits the
  step's labelled stream into each node's log and exit file (core/node/step.py). The plan
  shows each node's line as the step of its own that would run it by hand.
- srun direct: one step of N x G tasks with `--label`; its stream is split per node
  (srun_output.SrunDemux) into each node's log in the prefix format the Monitor reads.

The job's state is a SlurmJob (job.py) the backend holds; its end and the proof of every
node a SlurmTeardown (teardown.py) it holds too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddptui.core.backends.base import BackendError, Emit, HelperBackend, drill_args
from ddptui.core.backends.launch_stream import LaunchStream
from ddptui.core.backends.slurm import supervisor
from ddptui.core.backends.slurm.allocator import SlurmAllocator
from ddptui.core.backends.slurm.batch_script import (
    HELPER_FILE,
    HOOK_DIR,
    SECRET_FILE,
    batch_script,
    secret_file,
)
from ddptui.core.backends.slurm.cli import SlurmError, choose_query, ipv4_of
from ddptui.core.backends.slurm.commands import (
    STEP_LOG,
    direct_argv,
    direct_plan,
    direct_tag,
    every_node_argv,
    helper_argv,
    job_name,
    node_tag,
    nodes_step_argv,
    resolve_mode,
    salloc_argv,
    step_nodes,
    torchrun_lines,
    torchrun_plan,
)
from ddptui.core.backends.slurm.follow import (
    follow_direct,
    log_tail,
    probe_all,
    run_for_job,
    run_job_helper,
)
from ddptui.core.backends.slurm.gpu_follow import LabelledGpu, NodeGpuFollow
from ddptui.core.backends.slurm.job import SlurmJob
from ddptui.core.backends.slurm.log_follow import follow_log
from ddptui.core.backends.slurm.query import JobInfo
from ddptui.core.backends.slurm.srun_output import LostWatch, slurm_complaint
from ddptui.core.backends.slurm.supervisor import StepSupervisor
from ddptui.core.backends.slurm.teardown import SlurmTeardown
from ddptui.core.backends.transport import ChunkSink, LocalTransport, Transport, TransportError
from ddptui.core.events import AllocationChanged, Notice, TeardownReport
from ddptui.core.job.plan import DEFAULT_RDZV_PORT, LaunchPlan, NodeCommand, NodeTarget
from ddptui.core.job.spec import JobSpec
from ddptui.core.node import (
    STDIN_PROGRAM,
    job_text,
    node_probe_source,
    port_check_source,
    step_task_script,
    with_job,
)
from ddptui.core.runs.run_dir import RunDir

__all__ = ["SlurmBackend", "run_for_job"]

GPU_MARK_WAIT_S = 60.0  # how long the GPU sampler waits for the nodes' word on their GPUs
JOB_FRESH_S = 1.0  # how old an answer of squeue's on the job may be for the log followers


class SlurmBackend(HelperBackend):
    """Nodes Slurm allocates; the job's state in a SlurmJob, its end in a SlurmTeardown."""

    name = "slurm"
    logs_written_locally = True
    launch_on_node = False  # the step starts from this host; gpu_follow samples the nodes

    def __init__(self, spec: JobSpec, run: RunDir, emit: Emit) -> None:
        super().__init__(spec, run, emit)
        # "auto": resolved by allocate(), or restore()
        self.job = SlurmJob(
            spec.slurm.mode, spec.slurm.launch == "srun", spec.workdir or os.getcwd()
        )
        self.query = choose_query()
        self.alloc = SlurmAllocator(self.query, emit, job_name(run.run_id))
        self.teardown = SlurmTeardown(
            self.job,
            spec,
            run,
            self.alloc,
            self.query,
            emit,
            self._helper,
            self._reap_here,
            self.gpu_before,
        )
        self._transport = LocalTransport()
        self._ifnames: dict[str, str] = {}
        self._port_problem = ""
        self._told_batch_output = False
        self._restarts = 0  # the requeues seen (sbatch)
        self._complaints: set[str] = set()
        self._told_lost: set[str] = set()  # nodes srun said Slurm lost (LostWatch)
        self._step_nodes: dict[str, dict[str, Any]] = {}  # the one step's table (step.py)
        self._gpu_step: NodeGpuFollow | None = None  # every node's sampler, while followed
        self._gpu_users = 0
        self._gpu_begun: asyncio.Future[None] | None = None
        self._gpu_tools: dict[str, bool] = {}  # may the node have a GPU (probe, task's mark)
        self._job_asked: tuple[asyncio.Future[JobInfo | None] | None, float] = (None, 0.0)
        self._ahead: StepSupervisor | None = None  # the step's supervisor, started ahead

    def node_log_path(self, command: NodeCommand) -> str:
        if self.job.direct or command.tag == direct_tag(self.run.run_id):
            return str(self.run.path / STEP_LOG)  # the one step's own (srun's own lines)
        return str(self.run.node_log(command.index, command.node))

    async def stacks(self, command: NodeCommand, method: str | None = None) -> dict[str, Any]:
        """The worker hook's collector on the node, inside the allocation (`srun --overlap`)."""
        if self.job.mode == "sbatch" or self.job.job_id is None:
            raise BackendError("stacks are taken from steps this console starts, not sbatch's")
        try:
            return await self._helper(
                command.node,
                "collect",
                self.debug_dir(command),
                command.tag,
                method or self.spec.stacks_method,
                source=self._hook_source,
            )
        except SlurmError as exc:
            raise BackendError(f"{command.node}: could not take stacks: {exc}") from None

    async def drill(self, command: NodeCommand, at: float) -> dict[str, Any]:
        """The node helper's `drill` on the node, inside the allocation (`srun --overlap`,
        a batch job's too)."""
        if self.job.job_id is None:
            raise BackendError(f"{command.node}: no Slurm job to drill")
        try:
            args = drill_args(self.spec, command.tag, at)
            return await self._helper(command.node, "drill", *args)
        except SlurmError as exc:
            raise BackendError(f"{command.node}: could not drill: {exc}") from None

    # -- allocation -------------------------------------------------------------------------------

    async def allocate(self) -> list[NodeTarget]:
        self.job.mode = resolve_mode(self.spec)
        if self.job.direct:
            direct_argv(self.spec)  # a container engine srun cannot run fails here, early
        elif self.job.mode != "sbatch":  # the one step's supervisor starts while Slurm answers
            with contextlib.suppress(TransportError):  # else started at launch, as always
                self._ahead = supervisor.take(self.python(), self._helper_source, "launch")
        if self.job.mode == "existing":
            job = await self.alloc.existing(os.environ["SLURM_JOB_ID"])
            how = "the allocation this console runs in"
        elif self.job.mode == "salloc":
            job = await self.alloc.salloc(salloc_argv(self.spec, self.run.run_id))
            how = "salloc"
        else:
            job = await self._submit()
            how = "sbatch"
        self.job.cpus_per_node = job.cpus_per_node
        try:
            names = tuple(n.name for n in await self._take(job))
            self.emit(AllocationChanged("granted", job.job_id, names, how))
            if self.job.mode != "sbatch" and self.job.direct:
                await self._probe()  # torchrun's step checks what it needs itself
        except SlurmError as exc:
            raise BackendError(str(exc)) from None
        return self.job.nodes

    async def reach(self) -> tuple[list[NodeTarget], dict[str, str]]:
        """The allocation this console runs in, or one made for the look (`salloc --no-shell`,
        whatever the job's mode: a batch job would start the job itself)."""
        existing = os.environ.get("SLURM_JOB_ID")
        inside = existing and self.spec.slurm.mode in ("auto", "existing")
        self.job.mode = "existing" if inside else "salloc"
        try:
            if existing and inside:
                job = await self.alloc.existing(existing)
            else:
                job = await self.alloc.salloc(salloc_argv(self.spec, self.run.run_id))
            return await self._take(job), {}
        except SlurmError as exc:
            raise BackendError(str(exc)) from None

    def program_argv(self, node: str, *args: str) -> list[str]:
        name = f"{job_name(self.run.run_id)}-look"
        return helper_argv(self.job.job_id, node, name, self.spec.python, *args)

    def runs_dir(self) -> str:
        return self.job.cwd  # srun's output lands here; logs stay on the console's host

    async def _take(self, job: JobInfo) -> list[NodeTarget]:
        """The job's nodes, each with the address the others reach it at."""
        self.job.job_id = job.job_id
        names = await self._node_names(job)
        addresses = await self.query.node_addresses(names)
        # one thread for all nodes: a thread's hop per node cost 64 nodes a few hundred ms on
        # a loaded host, where NodeAddr is mostly an address already
        found = await asyncio.to_thread(lambda: [ipv4_of(addresses.get(n, n)) for n in names])
        self.job.nodes = [NodeTarget(n, address) for n, address in zip(names, found, strict=True)]
        return self.job.nodes

    async def _node_names(self, job: JobInfo) -> list[str]:
        names = await self.query.hostnames(job.nodes)
        if len(names) < self.spec.nodes:
            raise BackendError(
                f"job {job.job_id} has {len(names)} node(s) ({job.nodes}), "
                f"{self.spec.nodes} asked for"
            )
        return names[: self.spec.nodes]

    async def _submit(self) -> JobInfo:
        script = batch_script(
            self.spec,
            self.run.run_id,
            str(self.run.path.resolve()),
            self.spec.rdzv_port or DEFAULT_RDZV_PORT,
        )
        secrets = secret_file(self.spec)
        if secrets is not None:
            self.run.write_private(SECRET_FILE, secrets)
        self.run.write_private(HELPER_FILE, self._helper_source.decode())  # its last step
        (self.run.path / HOOK_DIR).mkdir(mode=0o700, exist_ok=True)  # the agents' (run_node)
        self.run.write_private(f"{HOOK_DIR}/sitecustomize.py", self._hook_source.decode())
        path = self.run.write_private("job.sbatch", script)
        self.emit(Notice("info", f"batch script (saved as {path}):\n{script}"))
        self.job.job_id = await self.alloc.submit(str(path))
        return await self.alloc.wait_running(self.job.job_id)

    async def _probe(self) -> None:
        """Each node's interfaces (for GLOO/NCCL_SOCKET_IFNAME) and a usable python there,
        and the rendezvous port on the first node: one srun step for every node (an srun
        client per node took 0.1-0.3 s of the launch each); a node that step missed is
        probed on its own, so its failure is told in its own words."""
        port = str(self.spec.rdzv_port or DEFAULT_RDZV_PORT)
        head = self.job.nodes[0]
        names = [n.name for n in self.job.nodes]
        reports: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(SlurmError):
            name = f"{job_name(self.run.run_id)}-probe"
            assert self.job.job_id is not None
            reports = await probe_all(
                self.spec, node_probe_source(), name, names, self.job.job_id, head.address, port
            )

        async def probe(node: NodeTarget) -> None:
            report = reports.get(node.name)
            if report is None:
                try:
                    args = (head.address, port) if node is head else ()
                    report = await self._helper(node.name, "probe", *args)
                except SlurmError as exc:
                    raise BackendError(
                        f"{node.name}: cannot run {self.spec.python} there through srun: {exc}"
                    ) from None
            self._gpu_tools[node.name] = bool(report.get("gpu", True))
            ifname = report.get("ifaces", {}).get(node.address)
            if ifname:
                self._ifnames[node.name] = ifname
            taken = report.get("port") if node is head else None
            if taken and not taken.get("free", True):
                self._port_problem = str(taken.get("error", ""))

        await asyncio.gather(*(probe(n) for n in self.job.nodes))

    async def rdzv_port(self, head: NodeTarget) -> int:
        port = self.spec.rdzv_port or DEFAULT_RDZV_PORT
        if self._port_problem:
            raise BackendError(
                f"rendezvous port {port} on {head.name} is not available "
                f"({self._port_problem}): choose another with --rdzv-port"
            )
        return port

    # -- plan and start ---------------------------------------------------------------------------

    def plan(self, nodes: Sequence[NodeTarget], port: int) -> LaunchPlan:
        """sbatch: what each node's share of the batch script runs; otherwise the srun
        steps this console starts (job_id None means: inside the batch script)."""
        job_id = None if self.job.mode == "sbatch" else self.job.job_id
        if not self.job.direct:
            if job_id is not None:
                lines = torchrun_lines(
                    self.spec, self.run.run_id, nodes, port, self.job.cwd, self._ifnames
                )
                self._step_nodes = step_nodes(self.spec, lines)
                self._start_checks(nodes, port)
            return torchrun_plan(
                self.spec,
                self.run.run_id,
                nodes,
                port,
                job_id,
                self.job.cwd,
                self.job.cpus_per_node,
                self._ifnames,
            )
        ifnames = sorted({self._ifnames[n.name] for n in nodes if n.name in self._ifnames})
        if len(ifnames) > 1 and not self.spec.socket_ifname:
            self.emit(
                Notice(
                    "warning",
                    f"nodes use different interfaces {ifnames}: the first "
                    "node's is used; pass --socket-ifname",
                )
            )
        return direct_plan(
            self.spec,
            self.run.run_id,
            nodes,
            port,
            job_id,
            self.job.cwd,
            self._ifnames.get(nodes[0].name),
        )

    def _start_checks(self, nodes: Sequence[NodeTarget], port: int) -> None:
        """What each node's task of the one step finds out before its torchrun starts
        (step_task.sh), in place of a probe step before it: the interface holding the
        node's address, and on the first node whether the rendezvous port can be bound."""
        for node in nodes:
            entry = self._step_nodes.get(node.name)
            if entry is None:
                continue
            if not self.spec.socket_ifname and node.name not in self._ifnames:
                entry["ifname_for"] = node.address
            if node is nodes[0]:
                entry["port_check"] = [node.address, port]

    async def start(self, command: NodeCommand) -> None:
        if self.job.mode == "sbatch":
            return  # the batch script started every node
        if self.job.direct:  # one step for every node: the first caller starts it
            await self.job.once("start", lambda: super(SlurmBackend, self).start(command))
            return
        await self.job.once("start", lambda: self._start_step(command))

    # -- plumbing ---------------------------------------------------------------------------------

    def transport(self, node: str) -> Transport:
        return self._transport

    def python(self) -> str:
        return sys.executable  # the shim's start/reap verbs run here, on the console's host

    async def _helper(
        self, node: str, verb: str, *args: str, inside: bool = True, source: bytes | None = None
    ) -> dict[str, Any]:
        name = f"{job_name(self.run.run_id)}-{verb}"
        job_id = self.job.job_id if inside else None
        shim = source or self._helper_source
        return await run_job_helper(self.spec, shim, name, node, job_id, verb, *args)

    # -- one step for every node ------------------------------------------------------------

    async def _start_step(self, first: NodeCommand) -> None:
        """Every node's torchrun in one step (a task per node, node/step.py), started
        detached by the node helper here, which splits its stream into each node's log and
        exit file (those files are what `follow` reads, as for a step per node)."""
        assert self.job.job_id is not None
        names = [n.name for n in self.job.nodes]
        argv = nodes_step_argv(
            self.spec, self.job.job_id, self.run.run_id, names, self.job.cpus_per_node, self.job.cwd
        )
        tag = direct_tag(self.run.run_id)
        step = NodeCommand(first.node, first.address, first.index, tuple(argv), {}, None, tag=tag)
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            job = job_text(self.launch_job(step))
            told = LaunchStream(lambda sink: ahead.run(job, sink))
            self._prestarted[step.node] = (step, told)
        await super().start(step)
        launch = self._launches.pop(step.node, None)
        if launch is not None:  # its tail of the step's own log is not needed
            await launch.close()

    def start_checks(self, command: NodeCommand) -> dict[str, Any]:
        """The one step's split: each node's task, log and order (node/step.py)."""
        if self.job.direct or command.tag != direct_tag(self.run.run_id):
            return {}
        logs = {n.name: str(self.run.node_log(i, n.name)) for i, n in enumerate(self.job.nodes)}
        python = shlex.split(self.spec.python)
        return {
            "split": {
                "nodes": self._step_nodes,
                "logs": logs,
                "order": [n.name for n in self.job.nodes],
                "program": base64.b64encode(step_task_script()).decode(),
                "python": python,
                "port": {
                    "source": base64.b64encode(port_check_source()).decode(),
                    "argv": [*python, "-S", "-c", STDIN_PROGRAM],
                },
            }
        }

    # -- the GPU sampler step ---------------------------------------------------------------

    async def _gpu_join(self) -> None:
        """The GPU sampler, one step with a task per node beside the job's, runs while any
        node is followed (gpu_follow.py); it starts once the nodes have said whether they
        may have a GPU, in the background, so following never waits for it."""
        if not self.spec.gpu_sample_ms or self.job.job_id is None:
            return
        self._gpu_users += 1
        if self._gpu_begun is None:
            self._gpu_begun = asyncio.ensure_future(self._gpu_begin())

    async def _gpu_begin(self) -> None:
        if not self.job.direct and self.job.mode != "sbatch":
            await self._gpu_marks()
        nodes = [n for n in self.job.nodes if self._gpu_tools.get(n.name, True)]
        if not nodes:
            return  # no GPU (nor nvidia-smi) on any node: nothing to sample
        self._gpu_step = self._gpu_follow(nodes)
        await self._gpu_step.start()

    async def _gpu_marks(self) -> None:
        """Each node's word from its task of the one step (LOG.gpu, step.py), or its end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GPU_MARK_WAIT_S
        waiting = dict(enumerate(self.job.nodes))
        while waiting and loop.time() < deadline:
            said = await asyncio.to_thread(self._gpu_said, waiting)
            self._gpu_tools.update(said)
            waiting = {i: n for i, n in waiting.items() if n.name not in said}
            if waiting:
                await asyncio.sleep(0.2)

    def _gpu_said(self, nodes: dict[int, NodeTarget]) -> dict[str, bool]:
        """What the nodes said so far: their GPU mark, or False for a node already ended."""
        said = {}
        for index, node in nodes.items():
            log = str(self.run.node_log(index, node.name))
            with contextlib.suppress(OSError):
                said[node.name] = Path(log + ".gpu").read_text().strip() == "1"
                continue
            if os.path.exists(log + ".exit"):
                said[node.name] = False
        return said

    async def _gpu_leave(self) -> None:
        if self._gpu_begun is None:
            return
        self._gpu_users -= 1
        if self._gpu_users <= 0:
            begun, self._gpu_begun = self._gpu_begun, None
            begun.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await begun
            step, self._gpu_step = self._gpu_step, None
            if step is not None:
                await step.stop()

    def _gpu_follow(self, nodes: Sequence[NodeTarget]) -> NodeGpuFollow:
        assert self.job.job_id is not None
        names = [n.name for n in nodes]
        name = f"{job_name(self.run.run_id)}-gpu"
        argv = every_node_argv(
            self.job.job_id, names, name, self.spec.python, "each", "gpu", label=True
        )
        ms, tasks = str(self.spec.gpu_sample_ms), "slurm" if self.job.direct else ""
        table = {
            n.name: [node_tag(self.run.run_id, i, self.job.direct), ms, "", tasks]
            for i, n in enumerate(self.job.nodes)
            if n.name in names
        }
        program = with_job(self._helper_source, {"nodes": table})
        demux = LabelledGpu(names, self.gpu_sample)
        return NodeGpuFollow(argv, program, lambda _: None, demux)

    # -- following --------------------------------------------------------------------------------

    async def follow(self, command: NodeCommand, offset: int, on_chunk: ChunkSink) -> int | None:
        await self._gpu_join()
        try:
            return await self._follow(command, offset, on_chunk)
        finally:
            await self._gpu_leave()

    async def _follow(self, command: NodeCommand, offset: int, on_chunk: ChunkSink) -> int | None:
        log = self.node_log_path(command)
        collectives = asyncio.ensure_future(self.follow_collectives(command.node, log))
        try:
            return await self._follow_log(command, offset, on_chunk)
        finally:
            collectives.cancel()

    async def _follow_log(
        self, command: NodeCommand, offset: int, on_chunk: ChunkSink
    ) -> int | None:
        if self.job.direct:
            code = await follow_direct(
                self.run.path / STEP_LOG,
                self.run.node_log(command.index, command.node),
                [n.name for n in self.job.nodes],
                self.spec.nproc_per_node,
                command.index,
                offset,
                on_chunk,
                self._ended,
            )
        else:
            watch = LostWatch(command.node, on_chunk, self._told_lost)
            code = await follow_log(
                Path(self.node_log_path(command)), offset, watch.feed, self._ended
            )
        if code != 0:
            self._slurm_complaint(Path(self.node_log_path(command)))
        return code

    def _slurm_complaint(self, log: Path) -> None:
        """srun refusing a step (an option it lacks without pyxis, too few CPUs...) is the
        reason the node failed: say it as an error, in Slurm's words, once."""
        tail = log_tail(log)
        refused = next((ln for ln in tail if ln.startswith("ddptui: rendezvous port ")), None)
        line = slurm_complaint(tail)
        said = refused[len("ddptui: ") :] if refused else f"Slurm: {line}" if line else None
        if said and said not in self._complaints:  # the head's task refused the port
            self._complaints.add(said)
            self.emit(Notice("error", said))

    async def ended(self, command: NodeCommand) -> int | None:
        """A run left detached: the node's exit file, else the job's end as Slurm says it
        (None while the job runs)."""
        code = exit_code(Path(self.node_log_path(command) + ".exit"))
        return code if code is not None else await self._ended()

    async def _ended(self) -> int | None:
        """None while the job may still write a node's exit file; else the code to report."""
        if self.job.job_id is None:
            return 1
        try:
            job = await self._job_lately()
        except SlurmError:
            return None
        if job is not None:
            self._requeued(job)
        if job is not None and not job.ended:
            return None
        self._batch_output_notice()
        return job.exit_code if job is not None and job.exit_code else 1

    async def _job_lately(self) -> JobInfo | None:
        """The job as squeue had it at most JOB_FRESH_S ago: every node's follower asks
        whether the job can still end its log (each after a while without output), and one
        answer serves them all: 64 quiet nodes asked squeue for the whole queue 32 times a
        second, a load on the controller and on the console's host."""
        loop = asyncio.get_running_loop()
        asked, at = self._job_asked
        if asked is None or loop.time() - at > JOB_FRESH_S:
            asked = asyncio.ensure_future(self.query.job(self.job.job_id or ""))
            self._job_asked = (asked, loop.time())
        return await asyncio.shield(asked)

    def _requeued(self, job: JobInfo) -> None:
        """A batch job Slurm requeued (preempted, a node failed, `scontrol requeue`) runs
        again under the same id: its script appends a new cycle to every node's log, which
        the followers read on; the operator is told once per requeue."""
        if job.restarts <= self._restarts:
            return
        self._restarts = job.restarts
        names = tuple(n.name for n in self.job.nodes)
        detail = f"requeue {job.restarts}: the same job runs again, followed as a new cycle"
        self.emit(AllocationChanged("requeued", self.job.job_id, names, detail, job.restarts))
        self.emit(Notice("warning", f"Slurm requeued job {self.job.job_id} ({detail})"))

    def _batch_output_notice(self) -> None:
        """A batch job that ended without a node's exit file: say what its script printed."""
        if (
            self.job.mode != "sbatch"
            or self._told_batch_output
            or self.job.job_id in self.alloc.released
        ):
            return
        self._told_batch_output = True
        out = self.run.path / f"slurm-{self.job.job_id}.out"
        if out.exists():
            tail = out.read_text(errors="replace").strip().splitlines()[-5:]
            self.emit(
                Notice(
                    "error",
                    f"job {self.job.job_id} ended; its output ends with:\n" + "\n".join(tail),
                )
            )

    # -- teardown (SlurmTeardown) -----------------------------------------------------------------

    async def reap(self, command: NodeCommand, lost: bool = False) -> TeardownReport:
        return await self.teardown.reap(command, lost)

    async def _reap_here(self, tag: str) -> list[int]:
        """The srun client this console started for the node (tagged too), if it lingers."""
        with contextlib.suppress(IndexError, ValueError):
            return list((await self.reap_tag(self._transport, tag))["leftover"])
        return []

    async def _drop_ahead(self) -> None:
        """The step's supervisor started ahead and never told its job: stopped."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            await asyncio.to_thread(ahead.close)

    async def release(self) -> None:
        await self._drop_ahead()
        await self.teardown.release()

    async def detach(self) -> None:
        await self._drop_ahead()
        if self.job.job_id is not None:
            self.teardown.announce("detached", f"the job runs on: ddptui attach {self.run.run_id}")

    # -- attach -----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "mode": self.job.mode,
            "direct": self.job.direct,
            "job_id": self.job.job_id,
            "cpus_per_node": self.job.cpus_per_node,
            "nodes": [[n.name, n.address] for n in self.job.nodes],
        }

    async def restore(self, state: dict[str, Any]) -> None:
        self.job.mode = state["mode"]
        self.job.direct = bool(state["direct"])
        self.job.job_id = state["job_id"]
        self.job.cpus_per_node = int(state.get("cpus_per_node", 0))
        self.job.nodes = [NodeTarget(name, address) for name, address in state["nodes"]]
        try:
            job = await self.query.job(self.job.job_id or "")
        except SlurmError as exc:
            raise BackendError(str(exc)) from None
        where = job.state if job is not None else "gone from squeue"
        self.teardown.announce("attached", f"job {self.job.job_id}: {where}")


def exit_code(path: Path) -> int | None:
    """The code in a node's exit file, None while there is none."""
    try:
        return int(path.read_text().strip() or "1")
    except (OSError, ValueError):
        return None
