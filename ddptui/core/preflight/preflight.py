"""Provides preflight: is this cluster ready for PyTorch distributed? Every node, every check.

Checks, per node: reachable (ddptui's helper runs there), python and torch (the job's own
python, after its activation step, asked in a process of its own: the console never imports
torch), gpu (devices vs processes, driver/CUDA alike, ECC, remapping, Xid: gpu_rules.py; no
`nvidia-smi` is "no GPU", not a failure), rdzv-port
(a listener on the first node's rendezvous port, reached from every node), hostname (the
127.0.1.1 trap, and nodes disagreeing about each other's addresses), clock (skew against the
first node), disk (free space where the run's files go) and script (present on the node);
last, gang: a short all-reduce across the job's processes, launched as the job is (gang.py).
Every failure says how to fix it. The rules are pure functions of what the nodes reported
(`evaluate`), so they are tested without a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from ddptui.core.backends.base import BackendError
from ddptui.core.events import Event
from ddptui.core.job.gpus import CUDA_VISIBLE
from ddptui.core.job.plan import DEFAULT_RDZV_PORT, NodeTarget
from ddptui.core.job.spec import JobSpec
from ddptui.core.preflight.access import NodeAccess, NodeAccessError, make_access
from ddptui.core.preflight.gang import NEEDED, GangRunner, gang_spec
from ddptui.core.preflight.model import CHECKS, FAIL, SKIP, WARN, Finding, Observations, worst
from ddptui.core.preflight.rules import evaluate

FACTS_TIMEOUT_S = 180.0
CONNECT_TIMEOUT_S = 5.0
ALL_NODES = "*"

__all__ = ["CHECKS", "CheckResult", "Observations", "Preflight", "PreflightSummary", "evaluate"]


@dataclass(frozen=True)
class CheckResult(Event):
    """One check on one node: ok, warn, fail or skip; a failure says how to fix it."""

    node: str
    check: str
    status: str
    detail: str
    fix: str = ""

    kind = "check"


@dataclass(frozen=True)
class PreflightSummary(Event):
    """The last event of a preflight: ready or not, and which checks failed where."""

    ok: bool
    nodes: tuple[str, ...]
    failed: tuple[str, ...] = ()  # "node: check"
    warnings: tuple[str, ...] = ()
    detail: str = ""

    kind = "preflight"


def as_result(finding: Finding) -> CheckResult:
    return CheckResult(finding.node, finding.check, finding.status, finding.detail, finding.fix)


def observations_for(spec: JobSpec, nodes: list[NodeTarget], port: int) -> Observations:
    launcher = spec.launcher if spec.slurm.launch == "torchrun" or spec.backend != "slurm" else ""
    env = dict(spec.env)
    if spec.backend == "local" and CUDA_VISIBLE in os.environ:
        env.setdefault(CUDA_VISIBLE, os.environ[CUDA_VISIBLE])  # the pseudo-nodes inherit it
    return Observations(
        nodes=nodes,
        port=port,
        backend=spec.backend,
        nproc_per_node=spec.nproc_per_node,
        launcher="" if spec.backend == "local" else launcher,
        container=spec.container.image if spec.container else None,
        script=spec.script,
        env=env,
        nodes_per_machine=spec.nodes if spec.backend == "local" else 1,
        gpu_split=spec.gpu_split and spec.container is None,
    )


class Preflight:
    """Checks every node of a job before launch; results go to `emit` as they are known."""

    def __init__(
        self,
        spec: JobSpec,
        emit: Callable[[Event], None],
        access: NodeAccess | None = None,
        gang: GangRunner | None = None,
        gang_min_busbw: float = 0.0,
    ) -> None:
        self.spec = spec
        self.emit = emit
        self.access = access or make_access(spec, emit)
        self.gang = gang
        self.gang_min_busbw = gang_min_busbw
        self.results: list[CheckResult] = []
        self._token = "ddptui-preflight-" + secrets.token_hex(4)

    def _report(self, result: CheckResult) -> None:
        self.results.append(result)
        self.emit(result)

    async def run(self) -> PreflightSummary:
        try:
            nodes = await self.access.open()
        except BackendError as exc:
            self._report(
                CheckResult(
                    ALL_NODES, "reachable", FAIL, f"no nodes: {exc}", "see the reason; then retry"
                )
            )
            return self._summary([])
        try:
            obs = await self._observe(nodes)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.access.close())
        await self._gang(obs)
        early = {(r.node, r.check) for r in self.results}
        for result in evaluate(obs):
            if (result.node, result.check) not in early:
                self._report(as_result(result))
        return self._summary([n.name for n in nodes])

    async def _observe(self, nodes: list[NodeTarget]) -> Observations:
        port = self.spec.rdzv_port or self._default_port()
        obs = observations_for(self.spec, nodes, port)
        obs.unreachable = dict(self.access.unreachable)
        reachable = [n for n in nodes if n.name not in obs.unreachable]
        await asyncio.gather(*(self._facts(obs, n) for n in reachable))
        reachable = [n for n in reachable if n.name not in obs.unreachable]
        names = sorted({str(f["hostname"]) for f in obs.facts.values() if f.get("hostname")})
        await asyncio.gather(
            *(self._resolve(obs, n, names) for n in reachable),
            self._port(obs, reachable),
        )
        return obs

    async def _gang(self, obs: Observations) -> None:
        """The all-reduce test, as a job of its own once the nodes are given back, if the
        checks it needs passed (else it is skipped, saying which failed where)."""
        obs.gang_min_busbw = self.gang_min_busbw
        if self.gang is None:
            obs.gang_skipped = "not run (--no-gang)"
            return
        blocking = [
            f"{f.check} on {f.node}"
            for f in evaluate(obs, checks=[c for c in CHECKS if c in NEEDED])
            if f.status == FAIL
        ]
        if blocking or not obs.live:
            obs.gang_skipped = "not run: " + (", ".join(blocking[:3]) or "no node reached")
            obs.gang_skipped += " failed" if blocking else ""
            return
        obs.gang = await self.gang(gang_spec(self.spec))

    def _default_port(self) -> int:
        if self.spec.backend == "local":
            from ddptui.core.backends.local import free_port

            return free_port()
        return DEFAULT_RDZV_PORT

    async def _facts(self, obs: Observations, node: NodeTarget) -> None:
        job = {
            "python": self.access.job_python,
            "launcher": shlex.split(obs.launcher)[0] if obs.launcher else "",
            "prelude": self.spec.activate,
            "env": dict(self.spec.env),
            "cwd": self.spec.workdir,
            "rundir": self.access.rundir,
            "script": None if obs.container else self.spec.script,
            "timeout": FACTS_TIMEOUT_S - 10,
        }
        sent = time.time()
        try:
            facts = await self.access.run(node.name, "facts", timeout=FACTS_TIMEOUT_S, job=job)
        except NodeAccessError as exc:
            obs.unreachable[node.name] = f"cannot run {self.spec.python} there: {exc}"
            return
        obs.facts[node.name] = facts
        obs.timing[node.name] = (sent, time.time())
        for result in evaluate(obs, only=(node.name,), checks=("reachable", "disk", "script")):
            self._report(as_result(result))

    async def _resolve(self, obs: Observations, node: NodeTarget, names: list[str]) -> None:
        with contextlib.suppress(NodeAccessError):
            obs.resolved[node.name] = await self.access.run(node.name, "resolve", *names)

    async def _port(self, obs: Observations, reachable: list[NodeTarget]) -> None:
        """A listener on the first node's port; every reachable node connects to it."""
        if not obs.nodes or obs.nodes[0] not in reachable:
            return
        head = obs.nodes[0]
        ready = asyncio.Event()
        seconds = CONNECT_TIMEOUT_S * 2 + 10

        def line(text: str) -> None:
            with contextlib.suppress(ValueError):
                report = json.loads(text)
                if "listening" in report:
                    obs.listen = report
                    ready.set()

        args = (str(obs.port), str(len(reachable)), str(seconds), self._token)
        listener = asyncio.ensure_future(
            self.access.stream(head.name, "listen", *args, on_line=line)
        )
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait({listener, waiter}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not ready.is_set():
            error = "the listener did not start"
            if listener.done() and listener.exception() is not None:
                error = str(listener.exception())
            obs.listen = {"listening": False, "error": error, "started": False}
            listener.cancel()
            return
        if obs.listen and obs.listen.get("listening"):

            async def connect(node: NodeTarget) -> None:
                timeout = str(CONNECT_TIMEOUT_S)
                try:
                    obs.connects[node.name] = await self.access.run(
                        node.name, "connect", head.address, str(obs.port), timeout, self._token
                    )
                except NodeAccessError as exc:
                    obs.connects[node.name] = {"ok": False, "error": f"helper failed: {exc}"}

            await asyncio.gather(*(connect(n) for n in reachable))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(listener, seconds + 30)

    def _summary(self, nodes: list[str]) -> PreflightSummary:
        failed = tuple(f"{r.node}: {r.check}" for r in self.results if r.status == FAIL)
        warnings = tuple(f"{r.node}: {r.check}" for r in self.results if r.status == WARN)
        ok = not failed and bool(nodes)
        detail = (
            f"{len(nodes)} node(s) ready for PyTorch distributed"
            if ok
            else f"{len(failed)} check(s) failed"
        )
        summary = PreflightSummary(ok, tuple(nodes), failed, warnings, detail)
        self.emit(summary)
        return summary


def cell_status(results: list[CheckResult], node: str, check: str) -> str:
    """The status a grid shows for (node, check): the worst of its results, or skip."""
    found = [r.status for r in results if r.node == node and r.check == check]
    return worst(found) if found else SKIP
