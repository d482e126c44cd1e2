"""Provides NodeAccess: preflight's way to the nodes of a job, through the job's own backend.

The backend gets the nodes without starting the job (`Backend.reach`: this machine, SSH
connections, the Slurm allocation the console runs in or one made for the look), NodeAccess
runs the preflight probe (ddptui/core/node/probe.py, sent on stdin as the job helper is) on
any of them the way that backend runs programs there, and the backend gives the nodes back.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from ddptui.core.backends.base import BackendError, Emit, HelperBackend
from ddptui.core.backends.factory import make_backend
from ddptui.core.backends.transport import CommandResult, Transport, TransportError
from ddptui.core.job.plan import NodeTarget
from ddptui.core.job.spec import JobSpec
from ddptui.core.node import probe_source, with_job
from ddptui.core.runs.run_dir import RunDir, state_dir

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


class NodeAccess:
    """The nodes of one job, as far as preflight needs them."""

    def __init__(self, spec: JobSpec, emit: Emit) -> None:
        self.spec = spec
        self.emit = emit
        backend = make_backend(spec, RunDir(state_dir() / "preflight" / _look_id()), emit)
        if not isinstance(backend, HelperBackend):
            raise BackendError(f"preflight cannot reach the nodes of a {spec.backend} job")
        self.backend = backend
        self.nodes: list[NodeTarget] = []
        self.unreachable: dict[str, str] = {}
        self._source = probe_source()

    @property
    def job_python(self) -> str:
        """The python the job's own processes use (asked about its torch)."""
        return self.backend.job_python()

    @property
    def rundir(self) -> str:
        """Where the job's files go on a node (free disk is checked there)."""
        return self.backend.runs_dir()

    async def open(self) -> list[NodeTarget]:
        """Every node of the job; those that cannot be reached are in `unreachable`."""
        self.nodes, self.unreachable = await self.backend.reach()
        return self.nodes

    async def close(self) -> None:
        """Give the nodes back."""
        await self.backend.release()

    def _transport(self, node: str) -> Transport:
        return self.backend.transport(node)

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
            result = await self._transport(node).run(
                self.backend.program_argv(node, verb, *args), stdin=stdin, timeout=timeout
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
            return await self._transport(node).stream(
                self.backend.program_argv(node, verb, *args), chunk, stdin=self._source
            )
        except TransportError as exc:
            raise NodeAccessError(str(exc)) from None


def _look_id() -> str:
    """A run id for the look, never created on disk: `ddptui-preflight-...` in squeue."""
    return f"preflight-{secrets.token_hex(3)}"


def make_access(spec: JobSpec, emit: Emit) -> NodeAccess:
    return NodeAccess(spec, emit)


def node_names(nodes: Sequence[NodeTarget]) -> tuple[str, ...]:
    return tuple(n.name for n in nodes)
