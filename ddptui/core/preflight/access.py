"""Provides NodeAccess: how preflight reaches the nodes of a job (this machine, SSH, Slurm).

Each form gets the job's nodes without starting the job, runs the node-side preflight helper
(ddptui/core/node/probe.py, sent on stdin as the node shim is) on any one of them, and gives the
nodes back: SSH connections closed, a Slurm allocation made for the check released.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from ddptui.core.backends.base import BackendError, Emit
from ddptui.core.backends.transport import CommandResult, LocalTransport, Transport, TransportError
from ddptui.core.job.plan import NodeTarget
from ddptui.core.job.spec import JobSpec
from ddptui.core.node import probe_source, with_job
from ddptui.core.runs.run_dir import state_dir

LineSink = Callable[[str], None]


class NodeAccessError(RuntimeError):
    """The helper could not be run on a node; the message says why, in one line."""


def last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            report: dict[str, Any] = json.loads(line)
            return report
    raise ValueError("no report")


def _why(result: CommandResult) -> str:
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {result.exit_code}"


class NodeAccess(ABC):
    """The nodes of one job, as far as preflight needs them."""

    def __init__(self, spec: JobSpec, emit: Emit) -> None:
        self.spec = spec
        self.emit = emit
        self.nodes: list[NodeTarget] = []
        self.unreachable: dict[str, str] = {}
        self._source = probe_source()

    @property
    def job_python(self) -> str:
        """The python the job's own processes use (asked about its torch)."""
        return self.spec.python

    @property
    @abstractmethod
    def rundir(self) -> str:
        """Where the job's files go on a node (free disk is checked there)."""

    @abstractmethod
    async def open(self) -> list[NodeTarget]:
        """Every node of the job; those that cannot be reached are in `unreachable`."""

    @abstractmethod
    def transport(self, node: str) -> Transport:
        """What runs the helper for this node."""

    @abstractmethod
    def argv(self, node: str, verb: str, *args: str) -> list[str]:
        """The helper's command line for a verb on this node."""

    async def close(self) -> None:
        """Give the nodes back."""

    async def run(
        self,
        node: str,
        verb: str,
        *args: str,
        timeout: float = 60,
        job: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run a helper verb on the node; its JSON report, or NodeAccessError. `job` goes
        to the helper inside its program on stdin, never on its command line."""
        stdin = self._source if job is None else with_job(self._source, job)
        try:
            result = await self.transport(node).run(
                self.argv(node, verb, *args), stdin=stdin, timeout=timeout
            )
        except TransportError as exc:
            raise NodeAccessError(str(exc)) from None
        try:
            return last_json(result.stdout)
        except ValueError:
            raise NodeAccessError(_why(result)) from None

    async def stream(self, node: str, verb: str, *args: str, on_line: LineSink) -> CommandResult:
        """Run a verb that reports as it goes (the port listener), line by line."""
        pending = b""

        def chunk(data: bytes) -> None:
            nonlocal pending
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                on_line(line.decode(errors="replace"))

        try:
            return await self.transport(node).stream(
                self.argv(node, verb, *args), chunk, stdin=self._source
            )
        except TransportError as exc:
            raise NodeAccessError(str(exc)) from None


class LocalAccess(NodeAccess):
    """The local backend's pseudo-nodes: this machine, N times."""

    def __init__(self, spec: JobSpec, emit: Emit) -> None:
        super().__init__(spec, emit)
        self._transport = LocalTransport()

    @property
    def job_python(self) -> str:
        return sys.executable  # the local backend runs this interpreter's torchrun

    @property
    def rundir(self) -> str:
        return str(state_dir() / "runs")

    async def open(self) -> list[NodeTarget]:
        self.nodes = [NodeTarget(f"local{i}", "127.0.0.1") for i in range(self.spec.nodes)]
        return self.nodes

    def transport(self, node: str) -> Transport:
        return self._transport

    def argv(self, node: str, verb: str, *args: str) -> list[str]:
        return [sys.executable, "-", verb, *args]


class SshAccess(NodeAccess):
    """The job's hosts over SSH, connected concurrently (at most `ssh.fanout` at a time)."""

    def __init__(self, spec: JobSpec, emit: Emit) -> None:
        from ddptui.core.backends.ssh.backend import make_transport

        super().__init__(spec, emit)
        self._transports = {h: make_transport(h, spec) for h in spec.hosts[: spec.nodes]}

    @property
    def rundir(self) -> str:
        from ddptui.core.backends.ssh.backend import REMOTE_RUNS

        return REMOTE_RUNS

    async def open(self) -> list[NodeTarget]:
        if len(self._transports) < self.spec.nodes:
            raise BackendError(
                f"{self.spec.nodes} nodes asked for, {len(self._transports)} host(s) given"
            )
        gate = asyncio.Semaphore(self.spec.ssh.fanout)

        async def connect(host: str) -> NodeTarget:
            transport = self._transports[host]
            async with gate:
                try:
                    await transport.connect()
                except TransportError as exc:
                    self.unreachable[host] = str(exc)
            return NodeTarget(host, getattr(transport, "peer_address", None) or host)

        self.nodes = list(await asyncio.gather(*(connect(h) for h in self._transports)))
        return self.nodes

    def transport(self, node: str) -> Transport:
        return self._transports[node]

    def argv(self, node: str, verb: str, *args: str) -> list[str]:
        return [*shlex.split(self.spec.python), "-", verb, *args]

    async def close(self) -> None:
        await asyncio.gather(*(t.close() for t in self._transports.values()))


class SlurmAccess(NodeAccess):
    """Nodes from Slurm: the allocation this console runs in, or one made for the check
    (`salloc --no-shell`, released afterwards); the helper runs on a node through
    `srun --jobid --overlap -w NODE`."""

    def __init__(self, spec: JobSpec, emit: Emit) -> None:
        super().__init__(spec, emit)
        self._transport = LocalTransport()
        self.job_id: str | None = None
        self._ours = False
        self._name = f"ddptui-preflight-{secrets.token_hex(3)}"
        self._alloc: Any = None

    @property
    def rundir(self) -> str:
        return self.spec.workdir or os.getcwd()  # srun's output lands here; logs stay local

    async def open(self) -> list[NodeTarget]:
        from ddptui.core.backends.slurm.allocator import SlurmAllocator
        from ddptui.core.backends.slurm.cli import SlurmError, choose_query, ipv4_of
        from ddptui.core.backends.slurm.commands import allocation_args

        query = choose_query()
        self._alloc = SlurmAllocator(query, self.emit, self._name)
        existing = os.environ.get("SLURM_JOB_ID")
        try:
            if existing and self.spec.slurm.mode in ("auto", "existing"):
                job = await self._alloc.existing(existing)
            else:
                argv = ["salloc", "--no-shell", f"--job-name={self._name}"]
                self._ours = True
                job = await self._alloc.salloc([*argv, *allocation_args(self.spec)])
            self.job_id = job.job_id
            names = (await query.hostnames(job.nodes))[: self.spec.nodes]
            addresses = await query.node_addresses(names)
        except SlurmError as exc:
            raise BackendError(str(exc)) from None
        self.nodes = [
            NodeTarget(n, await asyncio.to_thread(ipv4_of, addresses.get(n, n))) for n in names
        ]
        return self.nodes

    def transport(self, node: str) -> Transport:
        return self._transport

    def argv(self, node: str, verb: str, *args: str) -> list[str]:
        from ddptui.core.backends.slurm.commands import helper_argv

        return helper_argv(self.job_id, node, self._name, self.spec.python, verb, *args)

    async def close(self) -> None:
        if self._ours and self.job_id is not None and self._alloc is not None:
            await self._alloc.release(self.job_id)


def make_access(spec: JobSpec, emit: Emit) -> NodeAccess:
    kinds: dict[str, type[NodeAccess]] = {
        "local": LocalAccess,
        "ssh": SshAccess,
        "slurm": SlurmAccess,
    }
    return kinds[spec.backend](spec, emit)


def node_names(nodes: Sequence[NodeTarget]) -> tuple[str, ...]:
    return tuple(n.name for n in nodes)
