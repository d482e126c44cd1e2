"""Provides the Backend interface and HelperBackend, which drives nodes through a Transport."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ddptui.core.backends.gpu_stream import GpuDemux
from ddptui.core.backends.launch_stream import LaunchStream
from ddptui.core.backends.transport import ChunkSink, Transport, TransportError, TransportTimeout
from ddptui.core.events import Event, Notice, TeardownReport
from ddptui.core.job.plan import LaunchPlan, NodeCommand, NodeTarget, build_plan, node_container
from ddptui.core.job.spec import JobSpec
from ddptui.core.monitor.gpu import judge_gpus, memory_before
from ddptui.core.node import (
    STDIN_PROGRAM,
    job_helper_source,
    reaper_source,
    with_job,
    worker_hook_source,
)
from ddptui.core.runs.run_dir import RunDir

Emit = Callable[[Event], None]
GpuSampleSink = Callable[[str, dict[str, Any]], None]
REAP_GRACE_S = 3.0
START_TIMEOUT_S = 60.0


class BackendError(RuntimeError):
    """Nodes could not be had or reached; the message is for the operator, on one line."""


class NodeStartError(BackendError):
    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"{node}: {message}")
        self.node = node


class Backend(ABC):
    """Gets nodes, starts one agent per node, follows its output, and proves it gone."""

    name: ClassVar[str]
    logs_written_locally: ClassVar[bool] = False

    def __init__(self, spec: JobSpec, run: RunDir, emit: Emit) -> None:
        self.spec = spec
        self.run = run
        self.emit = emit
        # The session's reader of GPU samples (node, sample); None: they are dropped.
        self.gpu_sink: GpuSampleSink | None = None
        # Each node's GPU memory before the job (its first sample), for the teardown proof.
        self.gpu_before: dict[str, str] = {}

    def gpu_sample(self, node: str, record: dict[str, Any]) -> None:
        """A node's GPU sample arrived: the first is the level memory must return to."""
        if node not in self.gpu_before:
            self.gpu_before[node] = memory_before(record)
        if self.gpu_sink is not None:
            self.gpu_sink(node, record)

    @abstractmethod
    async def allocate(self) -> list[NodeTarget]:
        """Get the nodes; raise BackendError with a clear reason when that is impossible."""

    @abstractmethod
    async def rdzv_port(self, head: NodeTarget) -> int:
        """The c10d rendezvous port on the first node."""

    def plan(self, nodes: Sequence[NodeTarget], port: int) -> LaunchPlan:
        return build_plan(self.spec, nodes, self.run.run_id, port)

    @abstractmethod
    async def start(self, command: NodeCommand) -> None:
        """Start the node's command detached; raise NodeStartError when it cannot start."""

    @abstractmethod
    async def follow(self, command: NodeCommand, offset: int, on_chunk: ChunkSink) -> int | None:
        """Stream the node's output from byte `offset` until its agent exits.

        Returns the agent's exit code, or None when the connection was lost first.
        """

    @abstractmethod
    async def reap(self, command: NodeCommand) -> TeardownReport:
        """Stop every process of the job on the node and list what is left (should be none)."""

    async def stacks(self, command: NodeCommand, method: str | None = None) -> dict[str, Any]:
        """Every worker's stacks and flight-recorder dump on the node (worker_hook.collect);
        `method` "fr": the dumps alone (else the job's stacks method)."""
        raise BackendError(f"{self.name} cannot take stacks")

    async def kill_rank(self, command: NodeCommand, local_rank: int) -> str:
        """Fault injection: SIGKILL one worker of the node; what was killed, in words."""
        raise BackendError(f"{self.name} cannot kill one rank")

    async def ended(self, command: NodeCommand) -> int | None:
        """A run left detached, asked how it is: the node's exit code once its job has
        ended, None while it runs; BackendError when the node cannot tell."""
        raise BackendError(f"{self.name} cannot say whether a node's job has ended")

    async def release(self) -> None:
        """Give the allocation back (Slurm) and close connections."""

    async def detach(self) -> None:
        """Stop following but leave the job and its allocation running (`ddptui attach`)."""
        await self.release()

    def state(self) -> dict[str, Any]:
        """What `attach` needs to find the nodes again."""
        return {"backend": self.name}

    async def restore(self, state: dict[str, Any]) -> None:
        """Reconnect to a run started earlier, from what `state` returned then."""


class HelperBackend(Backend):
    """Nodes reached by a Transport (this machine, SSH), each running the node shim."""

    # Whether the helper's `launch` runs on the node itself, so its sampler sees the node's
    # GPUs (Slurm: it runs on the console's host, and the nodes are sampled otherwise).
    launch_on_node: ClassVar[bool] = True

    def __init__(self, spec: JobSpec, run: RunDir, emit: Emit) -> None:
        super().__init__(spec, run, emit)
        self._helper_source = job_helper_source()
        self._reaper_source = reaper_source()
        self._hook_source = worker_hook_source()
        self._launches: dict[str, LaunchStream] = {}
        self._prestarted: dict[str, tuple[NodeCommand, LaunchStream]] = {}

    @abstractmethod
    def transport(self, node: str) -> Transport:
        """The connected transport of a node."""

    @abstractmethod
    def node_log_path(self, command: NodeCommand) -> str:
        """Where the node keeps its full log (on the node)."""

    def python(self) -> str:
        return self.spec.python

    def _argv(self, verb: str, *args: str) -> list[str]:
        """`python3 -S -c STDIN_PROGRAM VERB ARGS`, the helper on stdin: it uses the standard
        library only, so the node's site-packages are not imported (their .pth files cost
        0.05-0.3 s per command here, paid by every probe, launch and reap on every node)."""
        return [self.python(), "-S", "-c", STDIN_PROGRAM, verb, *args]

    # -- a look at the nodes before launch (preflight) ---------------------------------------------

    async def reach(self) -> tuple[list[NodeTarget], dict[str, str]]:
        """The job's nodes, for a look before launch: nothing of the job is started and what
        the job itself needs is not checked (preflight checks and reports that). Returns the
        nodes and, for each node that cannot be reached, why; `release()` gives them back."""
        return await self.allocate(), {}

    def job_python(self) -> str:
        """The python the job's own processes use on the nodes."""
        return self.spec.python

    def program_argv(self, node: str, *args: str) -> list[str]:
        """How `node` runs a Python program read from stdin, with the job's python."""
        return [*shlex.split(self.job_python()), "-c", STDIN_PROGRAM, *args]

    def runs_dir(self) -> str:
        """Where the job's files go on a node."""
        return str(self.run.path.parent)

    def _launch_stream(self, command: NodeCommand) -> LaunchStream:
        """The helper's `launch` of the node's job, under way: its report, then its log."""
        job = {
            "argv": list(command.argv),
            "env": dict(command.env),
            "cwd": command.cwd,
            "prelude": command.prelude,
            "tag": command.tag,
            "log": self.node_log_path(command),
            "hook": self._hook_source.decode(),
            "flight_recorder": self.spec.flight_recorder,
            "gpu_sample_ms": self.spec.gpu_sample_ms if self.launch_on_node else 0,
            **self.start_checks(command),
        }
        transport = self.transport(command.node)
        argv, stdin = self._argv("launch"), with_job(self._helper_source, job)
        return LaunchStream(lambda sink: transport.stream(argv, sink, stdin=stdin))

    def prestart(self, command: NodeCommand) -> None:
        """Start the node's job now, ahead of the session's `start` (SSH: a host as soon as
        its own connection is up, while others still connect); `start` takes its report.
        Nodes started ahead that are never `start`ed must go through `abort_prestarted`."""
        self._prestarted[command.node] = (command, self._launch_stream(command))

    async def abort_prestarted(self) -> None:
        """Stop the nodes started ahead that the session will not follow (another host
        could not be had, or the operator stopped while hosts connected): each one's start
        is waited for (a job that starts after its reap would be left behind), then it is
        reaped and its proof goes out as a TeardownReport, as the session's teardown does."""
        ahead = [command for command, _ in self._prestarted.values()]
        reports = await asyncio.gather(*(self.reap(command) for command in ahead))
        for report in reports:
            self.emit(report)

    async def _settle(self, launch: LaunchStream) -> None:
        """Wait until a node's `launch` has started its job or failed to (a job that starts
        after its reap would be left behind), then stop following it."""
        with contextlib.suppress(TransportError, TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(launch.report), START_TIMEOUT_S)
        await launch.close()

    async def start(self, command: NodeCommand) -> None:
        """Start the node's job with the helper's `launch`, which then streams the log: the
        stream is kept for `follow`, so starting and following cost one remote command.
        A node `prestart`ed with this command is not started again: its report is taken."""
        ahead = self._prestarted.pop(command.node, None)
        if ahead is not None and ahead[0] != command:
            await ahead[1].close()  # its job, tagged as this one, is reaped at teardown
            raise NodeStartError(command.node, "was started ahead with another command")
        launch = ahead[1] if ahead is not None else self._launch_stream(command)
        try:
            report = await asyncio.wait_for(launch.started(), START_TIMEOUT_S)
        except (TransportError, TimeoutError) as exc:
            await launch.close()
            raise NodeStartError(command.node, str(exc) or "timed out") from None
        if not report.startswith("{"):
            await launch.close()
            if report.startswith("port-taken "):
                port = self.start_checks(command)["port_check"][1]
                raise BackendError(
                    f"rendezvous port {port} on {command.node} is not available "
                    f"({report[len('port-taken ') :]}): choose another with --rdzv-port"
                )
            raise NodeStartError(command.node, report)
        self._launches[command.node] = launch

    def start_checks(self, command: NodeCommand) -> dict[str, Any]:
        """What the node helper's `launch` checks or looks up before it starts the node
        (`port_check`, `ifname_for`: see job_helper.start); none by default."""
        return {}

    async def follow(self, command: NodeCommand, offset: int, on_chunk: ChunkSink) -> int | None:
        """The node's log to `on_chunk`; its GPU samples, taken out of the stream, to
        `gpu_sample` (the log's bytes and offsets are the node's own)."""
        launch = self._launches.pop(command.node, None)
        demux = GpuDemux(on_chunk, lambda record: self.gpu_sample(command.node, record))
        gpu_ms = str(self.spec.gpu_sample_ms)
        try:
            if launch is not None and offset == 0:
                result = await launch.follow(demux.feed)
            else:
                if launch is not None:
                    await launch.close()
                log = self.node_log_path(command)
                result = await self.transport(command.node).stream(
                    self._argv("tail", log, str(offset), command.tag, gpu_ms),
                    demux.feed,
                    stdin=self._helper_source,
                )
        except TransportError:
            demux.flush()
            return None
        demux.flush()
        for line in reversed(result.stderr.strip().splitlines()):
            if line.startswith('{"exit"'):
                return int(json.loads(line)["exit"])
        return None

    async def ended(self, command: NodeCommand) -> int | None:
        """The node helper's `status`: its exit file, else whether the job still runs."""
        argv = self._argv("status", self.node_log_path(command))
        try:
            result = await self.transport(command.node).run(
                argv, stdin=self._helper_source, timeout=30
            )
            report = json.loads(result.stdout.strip().splitlines()[-1])
        except (TransportError, IndexError, ValueError) as exc:
            raise BackendError(f"{command.node} cannot be asked: {exc}") from None
        if report["exit"] is not None:
            return int(report["exit"])
        if report["running"]:
            return None
        raise BackendError(f"{command.node}: the job is gone and left no exit code")

    def debug_dir(self, command: NodeCommand) -> str:
        """The node's debug directory (stacks, flight-recorder dumps), beside its log."""
        return os.path.splitext(self.node_log_path(command))[0] + ".debug"

    async def stacks(self, command: NodeCommand, method: str | None = None) -> dict[str, Any]:
        how = method or self.spec.stacks_method
        argv = self._argv("collect", self.debug_dir(command), command.tag, how)
        try:
            result = await self.transport(command.node).run(
                argv, stdin=self._hook_source, timeout=60
            )
            report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        except (TransportError, IndexError, ValueError) as exc:
            raise BackendError(f"{command.node}: could not take stacks: {exc}") from None
        return report

    async def kill_rank(self, command: NodeCommand, local_rank: int) -> str:
        """Fault injection: SIGKILL one worker of the node (the job helper's `kill_rank`);
        what was killed, in words."""
        argv = self._argv("kill_rank", command.tag, str(local_rank))
        try:
            result = await self.transport(command.node).run(
                argv, stdin=self._helper_source, timeout=30
            )
            killed = json.loads(result.stdout.strip().splitlines()[-1])["killed"]
        except (TransportError, IndexError, ValueError, KeyError) as exc:
            raise BackendError(
                f"{command.node}: could not kill local rank {local_rank}: {exc}"
            ) from None
        if not killed:
            raise BackendError(f"{command.node}: no worker of local rank {local_rank} runs")
        return (
            f"killed local rank {local_rank} on {command.node} (pid {', '.join(map(str, killed))})"
        )

    async def reap_tag(
        self, transport: Transport, tag: str, gpu_before: str = ""
    ) -> dict[str, Any]:
        """Run the node shim's `reap` through `transport`: {"found", "killed", "leftover",
        "names", "container" when the node's command runs in one, "gpu" on a node with
        GPUs}.

        Raises TransportError, or IndexError/ValueError when the shim printed no report.
        """
        result = await transport.run(
            self._argv("reap", *reap_args(self.spec, tag, gpu_before)),
            stdin=self._reaper_source,
            timeout=90,
        )
        report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        return report

    async def reap(self, command: NodeCommand) -> TeardownReport:
        launch = self._launches.pop(command.node, None)
        if launch is not None:  # started, never followed (another node failed to start)
            await launch.close()
        ahead = self._prestarted.pop(command.node, None)
        if ahead is not None:  # started ahead, never taken by `start`
            await self._settle(ahead[1])
        try:
            report = await self._reap_node(command)
        except (TransportError, IndexError, ValueError) as exc:
            return TeardownReport(command.node, False, (), f"could not check the node: {exc}")
        return teardown_report(command.node, report)

    async def _reap_node(self, command: NodeCommand) -> dict[str, Any]:
        """The node's reap over its held connection; where that connection was lost (a node
        too busy to answer keepalives, a restarted sshd, a blip in the network), once more
        over a new one: a reap is safe to repeat. One that ran out of time is not repeated,
        or the teardown would wait as long again."""
        before = self.gpu_before.get(command.node, "")
        transport = self.transport(command.node)
        try:
            return await self.reap_tag(transport, command.tag, before)
        except TransportTimeout:
            raise
        except TransportError as lost:
            self.emit(Notice("warning", f"{lost}; checking the node again over a new connection"))
            try:
                return await self.reap_tag(transport, command.tag, before)
            except TransportError as exc:
                raise TransportError(f"{exc} (the held connection was lost: {lost})") from None


def teardown_report(node: str, report: dict[str, Any]) -> TeardownReport:
    """The node shim's reap report as the teardown proof: processes, container, GPUs."""
    gpu = judge_gpus(report["gpu"]) if report.get("gpu") else None
    detail = f"{report['found']} process(es) found"  # reap_detail names any SIGKILLed
    detail += reap_detail(report) + (f"; {gpu.detail}" if gpu else "")
    clean = reap_clean(report) and (gpu is None or gpu.clean)
    return TeardownReport(node, clean, tuple(report["leftover"]), detail, gpu)


def reap_args(spec: JobSpec, tag: str, gpu_before: str = "") -> list[str]:
    """The node shim's `reap` arguments: the tag, the grace, the node's container, and each
    GPU's memory before the job (`0:503,1:503`, MiB) when it is known."""
    args = [tag, str(REAP_GRACE_S)]
    container = node_container(spec, tag)
    if gpu_before:
        return [*args, *(container or ("", "")), gpu_before]
    return [*args, *container] if container else args


def reap_clean(report: dict[str, Any]) -> bool:
    """No process left, and no container still listed (or not proven gone)."""
    container = report.get("container")
    return not report["leftover"] and not (container and container["listed"] is not False)


def reap_detail(report: dict[str, Any]) -> str:
    """What the shim saw, in words: the container's end, and every process by name."""
    names = report.get("names", {})
    parts = []
    container = report.get("container")
    if container:
        holders = len(container["holders"])
        if container["listed"] is None:
            gone = f"{container['engine']} could not be asked whether it is gone"
        elif container["listed"]:
            gone = f"still listed by {container['engine']} ps -a"
        else:
            gone = "removed" + (f", its conmon/shim ({holders}) gone" if holders else "")
        parts.append(f"container {container['name']} {gone}")
    for what in ("killed", "leftover"):
        pids = report.get(what) or []
        if pids:
            shown = ", ".join(f"{p} ({names.get(str(p)) or '?'})" for p in pids[:5])
            more = f" and {len(pids) - 5} more" if len(pids) > 5 else ""
            label = "needed SIGKILL" if what == "killed" else "LEFT RUNNING"
            parts.append(f"{label}: {shown}{more}")
    return "".join(f"; {p}" for p in parts)
