"""Provides NodeCollector: every node's stacks and flight-recorder dumps, taken in the background.

Stacks (with the dumps) are taken on a stall and on request; the flight recorder's dumps alone
on the run's first collective (watchdog) timeout and at the teardown of a job that was stuck,
when the job runs with the recorder; and, for the collective audit alone, at a rank's first
failure and again at the teardown that follows (a rank that exits leaves its dump behind: the
worker hook writes it at exit). Cheap at any size: each trigger asks each node once per
run, one collection runs at a time (a trigger arriving meanwhile runs after it), at most
PARALLEL nodes are asked at once, and the work is the nodes' (the console only reads reports).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ddptui.core.backends.base import Backend
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.nccl_ras import RasReport, may_ask
from ddptui.core.diagnose.nccl_ras import report as ras_report
from ddptui.core.events import Event, RankChanged, RankState
from ddptui.core.job.plan import LaunchPlan, NodeCommand
from ddptui.core.monitor.patterns import COLLECTIVE_TIMEOUT

PARALLEL = 8  # nodes asked at once
RAS_APART_S = 5.0  # NCCL RAS asked twice this far apart: counts that did not move are frozen
TEARDOWN_WAIT_S = 10.0  # the most a teardown waits for the dumps before it stops the job
WATCHDOG = "watchdog"
TEARDOWN = "teardown"
FAILURE = "failure"  # a rank failed: the dumps for the collective audit alone
FAILURE_END = "failure-teardown"


class NodeCollector:
    """Runs the node helper's collector on every node of one run, for the session."""

    def __init__(
        self,
        backend: Backend,
        plan: LaunchPlan,
        monitor: JobWatch,
        emit: Callable[[Event], None],
        recorder: bool,
    ) -> None:
        self.backend = backend
        self.plan = plan
        self.monitor = monitor
        self.emit = emit
        self.recorder = recorder
        self.triggered: set[str] = set()
        self._task: asyncio.Future[None] | None = None
        self._limit = asyncio.Semaphore(PARALLEL)

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def request_stacks(self) -> None:
        """Every rank's stacks now (not while a collection runs: it brings fresh ones)."""
        if not self.busy:
            self._task = asyncio.ensure_future(self._stacks())

    def watch(self, event: Event) -> None:
        """Sees every event of the run: the first collective timeout gathers the dumps."""
        if not isinstance(event, RankChanged):
            return
        if event.state == RankState.FAILED and FAILURE not in self.triggered:
            self._recorder(FAILURE)
        if WATCHDOG in self.triggered:
            return
        if any(d.kind == COLLECTIVE_TIMEOUT for d in event.diagnoses):
            self._recorder(WATCHDOG)

    async def at_teardown(self) -> None:
        """Before the job is stopped: let a collection finish, and gather the dumps of a job
        that was stuck (a stall, a hung rank, a watchdog timeout) while its ranks still live."""
        if self.monitor.stuck() or WATCHDOG in self.triggered:
            self._recorder(TEARDOWN)
        elif FAILURE in self.triggered:
            self._recorder(FAILURE_END)
        if self._task is not None and not self._task.done():
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(self._task), TEARDOWN_WAIT_S)

    def _recorder(self, trigger: str) -> None:
        if not self.recorder or trigger in self.triggered:
            return
        self.triggered.add(trigger)
        before = self._task

        async def after() -> None:
            if before is not None:
                with contextlib.suppress(Exception):
                    await before
            reports = await self._reports("fr")
            if trigger in (FAILURE, FAILURE_END):
                events = self.monitor.dumps_audited(reports, FAILURE)
            else:
                events = self.monitor.recorder_taken(reports, trigger)
            for event in events:
                self.emit(event)

        self._task = asyncio.ensure_future(after())

    async def _stacks(self) -> None:
        for event in self.monitor.stacks_taken(await self._reports(None)):
            self.emit(event)
        if self.monitor.stall.stalled and self.monitor.nccl_version is not None:
            await self._ras()

    async def _ras(self) -> None:
        """NCCL RAS on a stall of a job on NCCL, asked twice RAS_APART_S apart (never while
        the job is healthy; not on versions with known RAS faults: nccl_ras.may_ask)."""
        ok, why = may_ask(self.monitor.nccl_version)
        if not ok:
            self.emit(RasReport(False, why))
            return
        first = await self._ras_answers()
        await asyncio.sleep(RAS_APART_S)
        second = await self._ras_answers()
        for event in self.monitor.ras_taken(ras_report(first, second, RAS_APART_S, time.time())):
            self.emit(event)

    async def _ras_answers(self) -> dict[str, str | BaseException]:
        commands = self.plan.commands
        answers = await asyncio.gather(
            *(self._bounded_text(self.backend.ras(c)) for c in commands), return_exceptions=True
        )
        return dict(zip((c.node for c in commands), answers, strict=True))

    async def _bounded_text(self, ask: Awaitable[str]) -> str:
        async with self._limit:
            return await ask

    async def _reports(self, method: str | None) -> dict[str, Any]:
        return await gather_stacks(self.backend, self.plan.commands, method, self._limit)


async def gather_stacks(
    backend: Backend,
    commands: Sequence[NodeCommand],
    method: str | None = None,
    limit: asyncio.Semaphore | None = None,
) -> dict[str, Any]:
    """Every node's stacks report (with its flight-recorder dumps), or why there is none:
    the one gatherer, for the console's collector and for `ddptui stacks`."""
    bound = limit or asyncio.Semaphore(PARALLEL)

    async def ask(command: NodeCommand) -> dict[str, Any]:
        async with bound:
            return await backend.stacks(command, method)

    results = await asyncio.gather(*(ask(c) for c in commands), return_exceptions=True)
    return {
        c.node: str(r) if isinstance(r, BaseException) else r
        for c, r in zip(commands, results, strict=True)
    }
