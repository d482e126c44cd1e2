"""Provides the SSH backend: torchrun on a list of hosts, reached with asyncssh or paramiko."""

from __future__ import annotations

import asyncio
import posixpath
import time
from collections.abc import Sequence
from typing import Any

from ddptui.core.backends.base import BackendError, Emit, HelperBackend
from ddptui.core.backends.ssh.early_connect import (
    EarlySockets,
    environment_disables,
    take_preopened,
)
from ddptui.core.backends.transport import Transport, TransportError
from ddptui.core.events import AllocationChanged, NodeChanged, NodeState, Notice
from ddptui.core.job.plan import DEFAULT_RDZV_PORT, NodeCommand, NodeTarget, build_plan
from ddptui.core.job.spec import JobSpec
from ddptui.core.monitor.clock import ClockExchange
from ddptui.core.runs.run_dir import RunDir, node_log_name

REMOTE_RUNS = "~/.local/state/ddptui/runs"


def make_transport(host: str, spec: JobSpec) -> Transport:
    if spec.ssh.engine == "paramiko":
        from ddptui.core.backends.ssh.paramiko_transport import ParamikoTransport

        return ParamikoTransport(host, spec.ssh)
    from ddptui.core.backends.ssh.asyncssh_transport import AsyncsshTransport

    return AsyncsshTransport(host, spec.ssh)


class SshBackend(HelperBackend):
    """The hosts are the allocation; each runs the same torchrun line, the first one hosts
    the rendezvous. Connections fan out concurrently, at most `ssh.fanout` at a time."""

    name = "ssh"

    def __init__(self, spec: JobSpec, run: RunDir, emit: Emit) -> None:
        super().__init__(spec, run, emit)
        hosts = list(spec.hosts[: spec.nodes + spec.spares])  # spares: started on a loss
        # The first wave's TCP connects go out before the SSH engine is imported (0.1-0.2 s);
        # the command line may have opened them already, before the job's models loaded.
        self._early = EarlySockets()
        if spec.ssh.engine == "asyncssh" and not environment_disables():
            early = take_preopened()
            if early is None or not early.hosts():
                early = EarlySockets.open(hosts[: spec.ssh.fanout], spec.ssh.config_file)
            self._early = early
        self._transports = {h: make_transport(h, spec) for h in hosts}
        for transport in self._transports.values():
            offer = getattr(transport, "offer_early", None)
            if offer is not None:
                offer(self._early)
        self._addresses: dict[str, str] = {}
        self._picked_port: int | None = None

    def transport(self, node: str) -> Transport:
        return self._transports[node]

    async def clock_exchanges(self, node: str, count: int = 3) -> list[ClockExchange]:
        """The host's clock read by `date` (a few ms to start, unlike python) on the open
        connection, `count` times; a failed reading is left out."""
        out = []
        for _ in range(count):
            sent = time.time_ns()
            try:
                result = await self.transport(node).run(["date", "+%s%N"], timeout=10)
            except TransportError:
                continue
            received = time.time_ns()
            text = result.stdout.strip()
            if result.exit_code == 0 and text.isdigit():
                out.append(ClockExchange(sent, int(text), received))
        return out

    def node_log_path(self, command: NodeCommand) -> str:
        return posixpath.join(
            REMOTE_RUNS, self.run.run_id, node_log_name(command.index, command.node)
        )

    async def allocate(self) -> list[NodeTarget]:
        """Connect to every host; each host's job starts as soon as its own connection (and
        the first host's, whose address is the rendezvous endpoint) is up, not once all are:
        `start` then only takes its report. If a host cannot be had, the hosts started
        meanwhile are stopped and proven clean before the error is raised, as if none had."""
        hosts = list(self._transports)
        if len(hosts) < self.spec.nodes:
            raise BackendError(f"{self.spec.nodes} nodes asked for, {len(hosts)} host(s) given")
        self.emit(AllocationChanged("connecting", None, tuple(hosts)))
        try:
            await self._connect_all(hosts, start_ahead=True)
            if self.spec.rdzv_port is None:
                await self._pick_port(hosts[0])
        except BaseException:  # an unusable host, or the operator's stop while connecting
            await self.abort_prestarted()
            await self.release()
            raise
        self.emit(AllocationChanged("granted", None, tuple(hosts), "all hosts reachable"))
        return [NodeTarget(h, self._addresses[h]) for h in hosts]

    async def reach(self) -> tuple[list[NodeTarget], dict[str, str]]:
        hosts = list(self._transports)
        if len(hosts) < self.spec.nodes:
            raise BackendError(f"{self.spec.nodes} nodes asked for, {len(hosts)} host(s) given")
        gate = asyncio.Semaphore(self.spec.ssh.fanout)
        unreachable: dict[str, str] = {}

        async def one(host: str) -> NodeTarget:
            transport = self._transports[host]
            async with gate:
                try:
                    await transport.connect()
                except TransportError as exc:
                    unreachable[host] = str(exc)
            return NodeTarget(host, getattr(transport, "peer_address", None) or host)

        return list(await asyncio.gather(*(one(h) for h in hosts))), unreachable

    def runs_dir(self) -> str:
        return REMOTE_RUNS

    async def _connect_all(self, hosts: Sequence[str], start_ahead: bool = False) -> None:
        """Connect to every host, at most `ssh.fanout` at a time; raise BackendError naming
        each host that cannot be used. `start_ahead`: start each host's job once it and the
        first host are connected (`prestart`), until a host is known unusable."""
        gate = asyncio.Semaphore(self.spec.ssh.fanout)
        head: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        failed = False
        placeholders = [NodeTarget(h, h) for h in hosts]

        async def one(index: int, host: str) -> str | None:
            nonlocal failed
            error = None
            try:
                async with gate:
                    self.emit(NodeChanged(host, NodeState.CONNECTING))
                    try:
                        await self._connect(host)
                    except TransportError as exc:
                        failed, error = True, str(exc)
                        self.emit(NodeChanged(host, NodeState.FAILED, None, error))
                        return error
                    address = self._addresses[host]
                    self.emit(NodeChanged(host, NodeState.AUTHENTICATED, None, address))
            finally:
                if index == 0 and not head.done():
                    head.set_result(error is None and not failed)
            if start_ahead and await head and not failed and index < self.spec.nodes:
                self._start_ahead(placeholders, index)
            return None

        errors = [e for e in await asyncio.gather(*(one(i, h) for i, h in enumerate(hosts))) if e]
        if errors:
            raise BackendError(
                f"{len(errors)} of {len(hosts)} host(s) unusable: " + "; ".join(errors)
            )

    def _start_ahead(self, placeholders: Sequence[NodeTarget], index: int) -> None:
        """Start host `index`'s job: its command needs its own address and the first host's
        (the rendezvous endpoint), both known now; the others' are placeholders it ignores."""
        nodes = list(placeholders)
        for i in {0, index}:
            nodes[i] = NodeTarget(nodes[i].name, self._addresses[nodes[i].name])
        plan = build_plan(self.spec, nodes, self.run.run_id, self._port(), only=index)
        self.prestart(plan.commands[0])

    async def _connect(self, host: str) -> None:
        """Connect only: what a probe used to ask before launch (the interface holding the
        address reached, whether the rendezvous port is free) the node helper's `launch`
        works out itself, in the same round trip that starts the node (start_checks)."""
        transport = self._transports[host]
        await transport.connect()
        self._addresses[host] = getattr(transport, "peer_address", None) or host

    def _port(self) -> int:
        return self.spec.rdzv_port or self._picked_port or DEFAULT_RDZV_PORT

    async def _pick_port(self, head: str) -> None:
        """The default port held on the first node (another job's rendezvous, a server):
        its `launch` refused to start and named a port free there, which the job then uses.
        The nodes started ahead are stopped and start again with it; a port the operator
        gave is never changed (`start` refuses it, saying who holds it)."""
        taken = await self.head_port_taken(head)
        if taken is None or not taken.get("free_port"):
            return
        self._picked_port = int(taken["free_port"])
        self.emit(
            Notice(
                "warning",
                f"port {taken['port']} on {head} is {taken['why']}: the rendezvous uses "
                f"port {self._picked_port} there instead",
            )
        )
        await self.drop_prestarted()

    async def rdzv_port(self, head: NodeTarget) -> int:
        return self._port()  # checked on the first node by its `launch` (start_checks)

    def start_checks(self, command: NodeCommand) -> dict[str, Any]:
        checks: dict[str, Any] = {"ifname_for": command.address}
        if command.index == 0:  # the first node serves the rendezvous
            checks["port_check"] = [command.address, self._port()]
        return checks

    async def release(self) -> None:
        self._early.close()
        await asyncio.gather(*(t.close() for t in self._transports.values()))

    def state(self) -> dict[str, Any]:
        return {"backend": self.name, "hosts": list(self._transports)}

    async def restore(self, state: dict[str, Any]) -> None:
        try:
            await self._connect_all(list(self._transports))
        except BackendError:
            await self.release()
            raise
