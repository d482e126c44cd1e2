"""Provides the Backend interface and HelperBackend, which drives nodes through a Transport."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ddptui.core.backends.errors import (  # noqa: F401 - the backends' names for them
    SCRIPT_FIX,
    BackendError,
    NodeStartError,
    PortTaken,
    ScriptMissing,
    script_refusal,
)
from ddptui.core.backends.gpu_stream import GpuDemux
from ddptui.core.backends.launch_stream import LaunchStream
from ddptui.core.backends.rdzv_port import port_taken
from ddptui.core.backends.reap_report import (  # noqa: F401 - the backends' names for them
    REAP_GRACE_S,
    drill_args,
    reap_args,
    reap_clean,
    reap_detail,
    reap_timeout,
    teardown_report,
)
from ddptui.core.backends.transport import ChunkSink, Transport, TransportError, TransportTimeout
from ddptui.core.events import Event, Notice, TeardownReport
from ddptui.core.job.plan import LaunchPlan, NodeCommand, NodeTarget, build_plan
from ddptui.core.job.spec import JobSpec
from ddptui.core.monitor.clock import ClockExchange
from ddptui.core.monitor.gpu import memory_before
from ddptui.core.node import (
    STDIN_PROGRAM,
    job_helper_source,
    ras_query_source,
    reaper_source,
    with_job,
    worker_hook_source,
)
from ddptui.core.node.collective_follow import COLLECTIVES_KEY, CollectiveFollower
from ddptui.core.node.reaper import TAG_VAR
from ddptui.core.runs.run_dir import RunDir

Emit = Callable[[Event], None]
GpuSampleSink = Callable[[str, dict[str, Any]], None]
START_TIMEOUT_S = 60.0


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
        """A node's GPU sample arrived: the first is the level memory must return to. A line
        of a rank's collectives file comes the same way (COLLECTIVES_KEY), for the session."""
        if node not in self.gpu_before and COLLECTIVES_KEY not in record:
            self.gpu_before[node] = memory_before(record)
        if self.gpu_sink is not None:
            self.gpu_sink(node, record)

    async def follow_collectives(self, node: str, log_path: str) -> None:
        """The node's ranks' collectives files read on this machine, until cancelled (a
        backend whose node logs are on a filesystem it shares, as Slurm's): each new line to
        `gpu_sample`, as the node helper's `tail` sends them on the other backends."""
        demux = GpuDemux(lambda _: None, lambda record: self.gpu_sample(node, record))
        follower = CollectiveFollower.beside(log_path, demux.feed)
        try:
            while True:
                follower.poll()
                await asyncio.sleep(follower.every_s)
        finally:
            follower.poll()  # the ranks' last lines
            follower.close()

    async def clock_exchanges(self, node: str, count: int = 3) -> list[ClockExchange]:
        """`count` readings of the node's clock over the connection already held, each timed
        on the console's (`clock.estimate_offset` makes the offset of them). None by default:
        the node is this machine, or shares its clock."""
        return []

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
    async def reap(self, command: NodeCommand, lost: bool = False) -> TeardownReport:
        """Stop every process of the job on the node and list what is left (should be none);
        `lost`: one node of a running job, its agent stopped too (reap_args)."""

    async def drill(self, command: NodeCommand, at: float) -> dict[str, Any]:
        """A preemption drill on the node: at `at` (seconds since the epoch) the stop signals
        to every worker, each rank's end timed against the grace, SIGKILL after it
        (node/drill.py); the node's JSON report. BackendError when the node cannot be
        drilled."""
        raise BackendError(f"{self.name} cannot drill a preemption")

    async def stacks(self, command: NodeCommand, method: str | None = None) -> dict[str, Any]:
        """Every worker's stacks and flight-recorder dump on the node (worker_hook.collect);
        `method` "fr": the dumps alone (else the job's stacks method)."""
        raise BackendError(f"{self.name} cannot take stacks")

    async def ras(self, command: NodeCommand, timeout_s: float = 5.0) -> str:
        """NCCL RAS's text answer on the node (core/node/ras_query.py), asked once."""
        raise BackendError(f"{self.name} cannot ask NCCL RAS")

    async def kill_rank(self, command: NodeCommand, local_rank: int | None, signum: int = 9) -> str:
        """Fault injection: SIGKILL one worker of the node (None: every worker; another
        `signum`: SIGTERM to stop them); what was killed, in words."""
        raise BackendError(f"{self.name} cannot kill one rank")

    async def ended(self, command: NodeCommand) -> int | None:
        """A run left detached, asked how it is: the node's exit code once its job has
        ended, None while it runs; BackendError when the node cannot tell."""
        raise BackendError(f"{self.name} cannot say whether a node's job has ended")

    async def port_holders(self, command: NodeCommand, port: int) -> list[dict[str, Any]] | None:
        """Who listens on `port` on the node (netinfo.port_holders, with their job tags);
        None when this backend cannot ask the node."""
        return None

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
        transport = self.transport(command.node)
        argv = self._argv("launch")
        stdin = with_job(self._helper_source, self.launch_job(command))
        return LaunchStream(lambda sink: transport.stream(argv, sink, stdin=stdin))

    def launch_job(self, command: NodeCommand) -> dict[str, Any]:
        """What the helper's `launch` is told of the node's job (its JOB)."""
        return {
            "argv": list(command.argv),
            "env": dict(command.env),
            "cwd": command.cwd,
            "prelude": command.prelude,
            "tag": command.tag,
            "log": self.node_log_path(command),
            "hook": self._hook_source.decode(),
            "flight_recorder": self.spec.flight_recorder,
            "gpu_sample_ms": self.spec.gpu_sample_ms if self.launch_on_node else 0,
            "script_check": None
            if self.spec.container or not self.launch_on_node
            else self.spec.script,
            **self.start_checks(command),
        }

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

    async def head_port_taken(self, head: str) -> dict[str, Any] | None:
        """The port report of the first node's `launch` started ahead, when it refused to
        start because the rendezvous port is held there; None when it started (or did not
        start for another reason, which `start` tells)."""
        ahead = self._prestarted.get(head)
        if ahead is None:
            return None
        try:
            report = await asyncio.wait_for(asyncio.shield(ahead[1].report), START_TIMEOUT_S)
        except (TransportError, TimeoutError):
            return None
        return port_taken(report)

    async def drop_prestarted(self) -> None:
        """Stop the nodes started ahead, to start them again (another rendezvous port): as
        `abort_prestarted`, but a clean node is no news; one left unclean stops the launch."""
        ahead = [command for command, _ in self._prestarted.values()]
        reports = await asyncio.gather(*(self.reap(command) for command in ahead))
        unclean = [r for r in reports if not r.clean]
        for report in unclean:
            self.emit(report)
        if unclean:
            raise BackendError(f"{unclean[0].node}: {unclean[0].detail}")

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
            taken = port_taken(report)
            if taken is not None:
                raise PortTaken(command.node, taken)
            if report.startswith("script-missing "):
                raise ScriptMissing(command.node, report[len("script-missing ") :].strip())
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

    async def port_holders(self, command: NodeCommand, port: int) -> list[dict[str, Any]] | None:
        """The node helper's `port` over the node's connection (not from this host, where a
        step's launch runs: Slurm)."""
        if not self.launch_on_node:
            return None
        argv = self._argv("port", command.address, str(port), TAG_VAR)
        try:
            result = await self.transport(command.node).run(
                argv, stdin=self._helper_source, timeout=30
            )
            report = json.loads(result.stdout.strip().splitlines()[-1])
        except (TransportError, IndexError, ValueError):
            return None
        holders: list[dict[str, Any]] = report.get("holders", [])
        return holders

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

    async def ras(self, command: NodeCommand, timeout_s: float = 5.0) -> str:
        if not self.launch_on_node:  # its transport reaches this host, not the node
            raise BackendError(f"{self.name} cannot ask NCCL RAS on {command.node}")
        addr = dict(command.env).get("NCCL_RAS_ADDR", "localhost:28028")
        argv = self._argv("ras", addr, str(timeout_s))
        try:
            result = await self.transport(command.node).run(
                argv, stdin=ras_query_source(), timeout=timeout_s + 20
            )
            answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        except (TransportError, IndexError, ValueError) as exc:
            raise BackendError(f"{command.node}: could not ask NCCL RAS: {exc}") from None
        if "text" not in answer:
            raise BackendError(f"{command.node}: NCCL RAS: {answer.get('error', '?')}")
        return str(answer["text"])

    async def kill_rank(self, command: NodeCommand, local_rank: int | None, signum: int = 9) -> str:
        """Fault injection: SIGKILL one worker of the node (the job helper's `kill_rank`),
        or every worker (`local_rank` None: a torchft replica group); `signum` 15 stops them
        instead (an elastic job's workers stuck waiting for a lost node); what was done, in
        words."""
        which = f"local rank {local_rank}" if local_rank is not None else "every worker"
        argv = self._argv(
            "kill_rank", command.tag, "all" if local_rank is None else str(local_rank),
            str(signum),
        )  # fmt: skip
        try:
            result = await self.transport(command.node).run(
                argv, stdin=self._helper_source, timeout=30
            )
            killed = json.loads(result.stdout.strip().splitlines()[-1])["killed"]
        except (TransportError, IndexError, ValueError, KeyError) as exc:
            raise BackendError(f"{command.node}: could not kill {which}: {exc}") from None
        if not killed:
            raise BackendError(f"{command.node}: no worker ({which}) runs")
        done = "killed" if signum == 9 else f"signalled ({signal.Signals(signum).name})"
        return f"{done} {which} on {command.node} (pid {', '.join(map(str, killed))})"

    async def drill(self, command: NodeCommand, at: float) -> dict[str, Any]:
        """The node helper's `drill` over the node's connection (see Backend.drill)."""
        argv = self._argv("drill", *drill_args(self.spec, command.tag, at))
        try:
            result = await self.transport(command.node).run(
                argv, stdin=self._helper_source, timeout=reap_timeout(self.spec)
            )
            report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        except (TransportError, IndexError, ValueError) as exc:
            raise BackendError(f"{command.node}: could not drill: {exc}") from None
        return report

    async def reap_tag(
        self, transport: Transport, tag: str, gpu_before: str = "", lost: bool = False
    ) -> dict[str, Any]:
        """Run the node shim's `reap` through `transport`: {"found", "killed", "leftover",
        "names", "container" when the node's command runs in one, "gpu" on a node with
        GPUs}.

        Raises TransportError, or IndexError/ValueError when the shim printed no report.
        """
        result = await transport.run(
            self._argv("reap", *reap_args(self.spec, tag, gpu_before, lost)),
            stdin=self._reaper_source,
            timeout=reap_timeout(self.spec),
        )
        report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        return report

    async def reap(self, command: NodeCommand, lost: bool = False) -> TeardownReport:
        launch = self._launches.pop(command.node, None)
        if launch is not None:  # started, never followed (another node failed to start)
            await launch.close()
        ahead = self._prestarted.pop(command.node, None)
        if ahead is not None:  # started ahead, never taken by `start`
            await self._settle(ahead[1])
        try:
            report = await self._reap_node(command, lost)
        except (TransportError, IndexError, ValueError) as exc:
            return TeardownReport(command.node, False, (), f"could not check the node: {exc}")
        return teardown_report(command.node, report)

    async def _reap_node(self, command: NodeCommand, lost: bool = False) -> dict[str, Any]:
        """The node's reap over its held connection; where that connection was lost (a node
        too busy to answer keepalives, a restarted sshd, a blip in the network), once more
        over a new one: a reap is safe to repeat. One that ran out of time is not repeated,
        or the teardown would wait as long again."""
        before = self.gpu_before.get(command.node, "")
        transport = self.transport(command.node)
        try:
            return await self.reap_tag(transport, command.tag, before, lost)
        except TransportTimeout:
            raise
        except TransportError as dropped:
            again = f"{dropped}; checking the node again over a new connection"
            self.emit(Notice("warning", again))
            try:
                return await self.reap_tag(transport, command.tag, before, lost)
            except TransportError as exc:
                raise TransportError(f"{exc} (the held connection was lost: {dropped})") from None
