"""Provides Session: one run end to end — allocate, launch, stream, teardown, record."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any, TypeVar

from ddptui.core.backends.base import Backend, BackendError, ScriptMissing, script_refusal
from ddptui.core.backends.errors import NodeLost, ScriptRefused
from ddptui.core.backends.factory import make_backend
from ddptui.core.diagnose.audit_watch import MismatchReport
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.settings import SETTINGS_KEY, SettingsWatch
from ddptui.core.diagnose.signatures import lost_node, scheduler_end
from ddptui.core.diagnose.stall_events import StallReport
from ddptui.core.diagnose.verdict import VerdictReport, scheduler_verdict
from ddptui.core.events import (
    CONNECTION_LOST,
    LOST_BY,
    Event,
    FailureRecord,
    FailureReport,
    MetricSampled,
    NodeChanged,
    NodeState,
    Notice,
    PhaseChanged,
    PlanReady,
    RankChanged,
    RankState,
    RankSummary,
    RendezvousAsked,
    StopReason,
    TeardownReport,
    WorldJoined,
)
from ddptui.core.job.plan import LaunchPlan, NodeCommand
from ddptui.core.job.secret_env import StreamScrubber
from ddptui.core.job.spec import JobSpec, SpecError
from ddptui.core.monitor.clock import ZERO, estimate_offset
from ddptui.core.monitor.cycles import MembershipChange
from ddptui.core.monitor.monitor import MonitorSummary
from ddptui.core.node.collective_follow import COLLECTIVES_KEY
from ddptui.core.runs.history import RunRecorder
from ddptui.core.runs.run_dir import RunDir, new_run_id, open_private
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.collector import NodeCollector
from ddptui.core.session.drill import DRILL_FILE, drill_nodes, drill_table
from ddptui.core.session.membership import Membership, NodeAction, NodeActionKind
from ddptui.core.session.notify import Notifier
from ddptui.core.session.phase import RunPhaseWatch
from ddptui.core.session.watcher import (
    WATCHER_LOG,
    end_watch,
    give_way,
    keep_watch,
    start_watcher,
)
from ddptui.core.session.world_check import WorldCheck, WorldProblem
from ddptui.core.story import outcome
from ddptui.core.story.goodput import Goodput, GoodputAccount
from ddptui.core.story.incident import IncidentReport
from ddptui.core.story.story import Story, said_aloud

T = TypeVar("T")
FAILURE_GRACE_S = 2.0  # let the other nodes report their own failure before stopping them
WIND_DOWN_S = 20.0  # the most a node whose own rank failed gets to print torchrun's summary
RECONNECT_TRIES = 5
DRAIN_S = 5.0
CLOCK_EVERY_S = 180.0  # each node's clock offset measured again this often
LOG_TAIL_BYTES = 1 << 16  # of each node's log, read for the scheduler's word at the end


class Session:
    """Drives one job; every change is an Event handed to `emit` (the UI or headless printer)."""

    def __init__(
        self,
        spec: JobSpec,
        emit: Callable[[Event], None],
        run: RunDir | None = None,
        backend: Backend | None = None,
        detach_after_launch: bool = False,
        attaching: bool | None = None,
        watching: bool = False,
    ) -> None:
        self.spec = spec
        self.watching = watching  # the background watcher of a detached run (watcher.py)
        self.detach_after_launch = detach_after_launch
        self._emit_to = emit
        # A run directory given is one to attach to, unless told otherwise (the console makes
        # a new run's directory itself, before its session process starts).
        self.attaching = run is not None if attaching is None else attaching
        self.run = run or RunDir.create(new_run_id())
        self.history = RunRecorder(self.run, spec)
        self.backend = backend or make_backend(spec, self.run, self.emit)
        self.plan: LaunchPlan | None = None
        self.monitor: JobWatch | None = None
        self.teardown_reports: dict[str, TeardownReport] = {}
        self.node_exit: dict[str, int | None] = {}
        self._stop = asyncio.Event()
        self._stop_reason: StopReason | None = None
        self._last_error = ""
        self.refused = ""  # why the job was refused before launch: bad input (ScriptRefused)
        self._detach = False
        self._logs: dict[str, IO[bytes]] = {}
        self._first_failed_node: str | None = None
        self._grace: asyncio.Future[None] | None = None
        self._restarting: asyncio.Future[None] | None = None  # an elastic round without a lost node
        self._drill: asyncio.Future[None] | None = None  # a preemption drill under way
        self.collector: NodeCollector | None = None
        self.settings: SettingsWatch | None = None  # the ranks' settings, compared
        self.phase = RunPhaseWatch()
        self.world: WorldCheck | None = None
        self._world_probe: asyncio.Future[None] | None = None
        self._launch_failure = ""
        self._absent: set[str] = set()  # nodes stopped because they never joined (elastic)
        self._lost: set[str] = set()  # nodes the scheduler said it lost
        self.membership = Membership(spec, self.emit)
        self._followers: list[asyncio.Future[None]] = []
        self._followed = asyncio.Event()  # a follower was added (a spare joined)
        self.story = Story()
        self.goodput = GoodputAccount()  # where the wall time goes, for the summary
        self.notifier = Notifier.for_job(spec, self.run, self.emit)  # None: no --notify

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def emit(self, event: Event) -> None:
        told = self.story.seen(event)
        if not said_aloud(event):
            self._emit_all(told)
            return
        began: Sequence[Event] = ()  # the attempt the event begins (a restart, a requeue)
        if event.recorded:
            self.run.record(event)
            began = self.history.observe(event)
        if self.collector is not None:
            self.collector.watch(event)
        self._emit_to(event)
        self._phase_changed(self.phase.seen(event))
        self._emit_all(self.goodput.seen(event))
        match event:
            case MetricSampled():
                self.run.record_metric(event)
            case Notice(level="error"):
                self._last_error = event.message
            case MismatchReport() if event.mismatch.culprits and self.collector is not None:
                self.request_stacks()  # the ranks involved, while they live (not if busy)
            case RendezvousAsked() | WorldJoined() | RankChanged() if self.world is not None:
                problem = self.world.seen(event)
                if problem is not None:
                    self._world_failed(problem)
            case IncidentReport() if self.notifier is not None:
                self.notifier.seen(event)
        self._emit_all([*told, *began])

    def _emit_all(self, events: Sequence[Event]) -> None:
        for event in events:
            self.emit(event)

    def _phase_changed(self, change: PhaseChanged | None) -> None:
        if change is not None:
            self.emit(change)

    def request_teardown(self) -> None:
        """Stop the job on every node (any time: before, during or after launch)."""
        self._tear_down()

    def _tear_down(self, why: str = "") -> None:
        """The operator's stop; `why`: the story's words for it, when not a plain teardown
        (a drill's outcome)."""
        self._stop_reason = self._stop_reason or StopReason.OPERATOR
        if (
            self._stop_reason == StopReason.OPERATOR
            and self.plan is not None
            and not self._stop.is_set()
        ):
            self._emit_all(self.story.operator_stopped(why))
        self._stop.set()
        self._phase_changed(self.phase.teardown_asked())

    def request_detach(self) -> None:
        """Stop following but leave the job running; `attach` picks it up later."""
        self._detach = True
        self._stop_reason = StopReason.DETACHED
        self._stop.set()
        self._phase_changed(self.phase.detach_asked())

    def request_drill(self) -> None:
        """The operator's preemption drill (drill.py; the console asked for confirmation):
        the stop signal to every rank, each one's exit timed; then the run is torn down."""
        if self.plan is None or self._stop.is_set() or self._drill is not None:
            self.emit(Notice("warning", "preemption drill: no running job to drill"))
            return
        self._stop_reason = StopReason.OPERATOR  # the ranks' ends are the drill's, not failures
        if self.monitor is not None:
            self.monitor.teardown_started()
        signals = "+".join(f"SIG{s}" for s in self.spec.stop_signals)
        self.emit(
            Notice(
                "warning",
                f"preemption drill: {signals} to every rank, {self.spec.grace:g} s to exit",
            )
        )
        self._drill = asyncio.ensure_future(self._drill_nodes())

    async def _drill_nodes(self) -> None:
        assert self.plan is not None
        running = [c for c in self.plan.commands if self.node_exit.get(c.node, 0) is None]

        def ranks() -> tuple[Any, ...]:  # each rank's end as its agent said it
            return self.monitor.summary().ranks if self.monitor is not None else ()

        why = "a preemption drill"
        try:
            report = await drill_nodes(self.spec, self.backend, running, self._followers, ranks)
            why = report.headline
            self.emit(report)
            self.run.write_private(DRILL_FILE, report.to_json())
            self.run.write_private("drill.txt", "\n".join(drill_table(report)) + "\n")
        finally:
            self._tear_down(why)  # the drill ends the run, whatever became of it

    def request_node_action(self, action: NodeAction) -> None:
        """The operator's kill or drain of a node, or kill of one rank (fault injection);
        the console asked for confirmation first. Refused unless the node runs."""
        if self.plan is None or self._stop.is_set():
            self.emit(Notice("warning", f"{action.kind} {action.node}: the job is not running"))
            return
        asyncio.ensure_future(self._node_action(action))

    async def _node_action(self, action: NodeAction) -> None:
        assert self.plan is not None
        node = action.node
        if node not in self.plan.node_names or self.node_exit.get(node, 0) is not None:
            self.emit(Notice("warning", f"{action.kind} {node}: no agent of the job runs there"))
            return
        command = self.plan.command_for(node)
        if action.kind in (NodeActionKind.KILL_RANK, NodeActionKind.KILL_GROUP):
            if action.kind == NodeActionKind.KILL_GROUP and not self.spec.ft_replicas:
                self.emit(Notice("warning", f"kill_group {node}: not a torchft job"))
                return
            local_rank = (
                (action.local_rank or 0) if action.kind == NodeActionKind.KILL_RANK else None
            )
            try:
                said = await self.backend.kill_rank(command, local_rank)
            except BackendError as exc:
                self.emit(Notice("error", str(exc)))
                return
            self.emit(Notice("warning", f"fault injection: {said}"))
            return
        change = self.membership.operator_took(node, action)
        if self.monitor is not None:
            self.monitor.cycles.node_left(node, change, None)
        self.emit(Notice("warning", f"{node}: {change} by the operator: stopping its agent"))
        report = await self.backend.reap(command, lost=True)
        proof = "nothing of the job left" if report.clean else f"left: {report.detail}"
        self.emit(Notice("info", f"{node}: agent stopped ({proof})"))

    async def run_job(self) -> RunSummary:
        detail = ""
        self.history.begin()
        self._phase_changed(self.phase.started(self.attaching))
        if self.history.problem:
            self.emit(Notice("warning", self.history.problem))
        try:
            if self.attaching:
                await self._reattach()
            else:
                await self._launch()
                if self.detach_after_launch:
                    self.request_detach()
            await self._watch()
        except (SpecError, BackendError) as exc:
            if self._stop_reason == StopReason.OPERATOR and self.plan is None:
                detail = ""  # stopped while the nodes were still pending: the operator's stop
            else:
                detail = str(exc)
                self._stop_reason = StopReason.ERROR
                self.refused = detail if isinstance(exc, ScriptRefused) else ""
                self.emit(Notice("error", detail))
        finally:
            if self._detach:
                await self._release_followers()
            else:
                await self._teardown()
        return await self._finish(detail)

    # -- phases ---------------------------------------------------------------------------

    async def _launch(self) -> None:
        self.spec = self.spec.unmasked()
        self.backend.spec = self.spec
        self.run.write_spec(self.spec)
        self.emit(
            Notice(
                "info",
                f"run {self.run_id}: getting {self.spec.nodes} node(s) from {self.backend.name}",
            )
        )
        if self.spec.shape_note:  # the shape ddptui chose for this machine, and why
            self.emit(Notice("info", self.spec.shape_note))
        nodes = await self._until_stopped(self.backend.allocate())
        port = await self.backend.rdzv_port(nodes[0])
        self.plan = self.backend.plan(nodes, port)
        self.run.write_plan(self.plan, self.backend.state())
        self._announce_plan(self.plan)
        first = self.membership.split(self.plan.commands)  # the spares wait: not followed
        self._start_monitor(self.plan)
        started = await asyncio.gather(
            *(self._start_node(c) for c in first), return_exceptions=True
        )
        errors = [e for e in started if isinstance(e, BaseException)]
        missing = [e for e in errors if isinstance(e, ScriptMissing)]
        if missing:
            here = os.getcwd()
            under = any(m.path.startswith(here.rstrip("/") + "/") for m in missing)
            raise script_refusal(missing, self.spec.workdir, here if under else "")
        if errors:
            raise errors[0] if isinstance(errors[0], BackendError) else BackendError(str(errors[0]))

    async def _reattach(self) -> None:
        try:
            gone = await asyncio.to_thread(give_way, self.run)
        except TimeoutError as exc:  # both follow it; each incident is told once still
            self.emit(Notice("warning", str(exc)))
        else:
            if gone is not None:
                self.emit(Notice("info", f"the run's watcher (PID {gone.pid}) gave way"))
        if self.watching:
            keep_watch(self.run)
        self.plan, state = self.run.read_plan()
        before = self.run.read_summary()
        if before and before.get("detached") and isinstance(before.get("goodput"), dict):
            with contextlib.suppress(KeyError, TypeError, ValueError):  # a summary cut short
                self.goodput.carry(Goodput.from_dict(before["goodput"]))
        self._announce_plan(self.plan)
        await self.backend.restore(state)
        self._start_monitor(self.plan)
        self.emit(Notice("info", f"attached to run {self.run_id}"))

    def _announce_plan(self, plan: LaunchPlan) -> None:
        lines = tuple((c.node, c.shell_line()) for c in plan.commands)
        self.emit(PlanReady(self.run_id, plan.rdzv_endpoint, lines))

    def _start_monitor(self, plan: LaunchPlan) -> None:
        self.monitor = JobWatch(
            plan.node_names,
            plan.nproc_per_node,
            self.spec.progress_pattern,
            metric_patterns=self.spec.metric_patterns,
            metrics=self.spec.read_metrics,
            max_restarts=self.spec.max_restarts,
            replica_groups=bool(self.spec.ft_replicas),
        )
        recorder = self.spec.flight_recorder
        self.collector = NodeCollector(self.backend, plan, self.monitor, self.emit, recorder)
        self.backend.gpu_sink = self._gpu_sample
        ranks = sum(not self.membership.is_spare(c.node) for c in plan.commands)
        firsts = {n: i * plan.nproc_per_node for i, n in enumerate(plan.node_names)}
        self.settings = SettingsWatch(
            ranks * plan.nproc_per_node or None,
            self.spec.secret_env,
            offsets=firsts if self.spec.ft_replicas else None,  # torchft: a world per group
        )
        for command in plan.commands:
            if self.membership.is_spare(command.node):
                self.emit(NodeChanged(command.node, NodeState.WAITING, None, "spare"))
            else:
                self.node_exit[command.node] = None
                self.emit(NodeChanged(command.node, NodeState.WAITING))
            if not self.backend.logs_written_locally:
                path = self.run.node_log(command.index, command.node)
                self._logs[command.node] = open_private(path, "wb" if self.attaching else "ab")
        for event in self.monitor.initial_events():
            self.emit(event)
        if not self.attaching and not self.spec.ft_replicas:  # torchft: a world per group
            compare = self.backend.name in ("local", "ssh")  # commands as the plan wrote them
            spares = frozenset(c.node for c in self.membership.spares)
            self.world = WorldCheck(plan, time.time(), compare_endpoint=compare, spares=spares)

    def _gpu_sample(self, node: str, record: dict[str, Any]) -> None:
        assert self.monitor is not None
        line = record.get(COLLECTIVES_KEY)
        if isinstance(line, dict) and SETTINGS_KEY in line and self.settings is not None:
            events = self.settings.seen(node, line, time.time())  # a rank's settings report
        elif COLLECTIVES_KEY in record:
            events = self.monitor.collectives(node, record[COLLECTIVES_KEY])
        else:
            events = self.monitor.gpu_sample(node, record)
        for event in events:
            self.emit(event)

    def set_speed(self, paused: bool | None = None, threshold: float | None = None) -> None:
        """The operator pauses or resumes the straggler watch, or moves its threshold."""
        if self.monitor is None:
            return
        speed = self.monitor.speed
        if paused is not None:
            speed.set_paused(paused)
        if threshold is not None:
            value = speed.set_threshold(threshold)
            self.emit(Notice("info", f"straggler threshold {value:.2f}"))

    async def _clocks(self) -> None:
        """Each node's clock offset from this machine's, by a few readings over the backend's
        own connection, now and every CLOCK_EVERY_S (none where the backend shares the clock)."""
        assert self.plan is not None
        while True:
            for command in self.plan.commands:
                try:
                    exchanges = await self.backend.clock_exchanges(command.node)
                except Exception:  # a reading is never worth the run: the offset stays
                    continue
                offset = estimate_offset(exchanges)
                if offset is not None and self.monitor is not None:
                    self.monitor.clock_offset(command.node, offset if offset.told else ZERO)
            await asyncio.sleep(CLOCK_EVERY_S)

    async def _start_node(self, command: NodeCommand) -> None:
        try:
            await self.backend.start(command)
        except BackendError as exc:
            self.emit(NodeChanged(command.node, NodeState.FAILED, None, str(exc)))
            raise
        self.emit(NodeChanged(command.node, NodeState.LAUNCHED, None, command.shell_line()))

    async def _until_stopped(self, awaitable: Awaitable[T]) -> T:
        """Wait for allocation, but give up at once if the operator tears down meanwhile."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise BackendError("cancelled while waiting for nodes")
        return task.result()

    async def _watch(self) -> None:
        assert self.plan is not None
        self._followers = [
            asyncio.ensure_future(self._follow(c))
            for c in self.plan.commands
            if c.node in self.node_exit
        ]
        ticker = asyncio.ensure_future(self._tick())
        clocks = asyncio.ensure_future(self._clocks())
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop.wait())
        while not stop.done():
            # Teardown drains or cancels the followers; their outcome is read there, not here.
            everything: asyncio.Future[Any] = asyncio.gather(*self._followers)
            everything.add_done_callback(lambda f: f.cancelled() or f.exception())
            added = asyncio.ensure_future(self._followed.wait())
            await asyncio.wait([stop, everything, added], return_when=asyncio.FIRST_COMPLETED)
            added.cancel()
            if not self._followed.is_set():
                break
            self._followed.clear()  # a spare joined: wait for its follower too
        ticker.cancel()
        if self._world_probe is not None:
            self._world_probe.cancel()
        clocks.cancel()
        for pending in (self._grace, self._restarting):
            if pending is not None:
                pending.cancel()
        stop.cancel()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self._probe_world()
            if self.settings is not None:
                self._emit_all(self.settings.tick(time.time()))
            if self.monitor:
                for event in self.monitor.tick(time.time(), self.spec.hang_timeout):
                    self.emit(event)
                    if isinstance(event, StallReport) and not event.groups:
                        self.request_stacks()
            self._emit_all(self.goodput.tick(time.time()))

    def _probe_world(self) -> None:
        """No complete world yet: ask the nodes who listens on the rendezvous port, in the
        background (the answer may take a round trip per node)."""
        if self.world is None or self._launch_failure or self._stop.is_set():
            return
        if self._world_probe is not None and not self._world_probe.done():
            return
        nodes = self.world.probe_due(time.time())
        if nodes and self.plan is not None:
            asked = [c for c in self.plan.commands if c.node in nodes]
            self._world_probe = asyncio.ensure_future(self._ask_port_holders(asked))

    async def _ask_port_holders(self, commands: list[NodeCommand]) -> None:
        assert self.world is not None
        port = self.world.port
        found = await asyncio.gather(*(self.backend.port_holders(c, port) for c in commands))
        holders = {c.node: h for c, h in zip(commands, found, strict=True) if h is not None}
        problem = self.world.holders_seen(holders) if holders else None
        if problem is not None and not self.world.complete():
            self._world_failed(problem)

    def _world_failed(self, problem: WorldProblem) -> None:
        """A node is in the wrong world: the launch failed, naming it; the job is stopped
        (the others would wait for it until the join timeout)."""
        if self._launch_failure or self._stop.is_set():
            return
        self._launch_failure = problem.explanation
        record = FailureRecord(
            node=problem.node,
            rank=None,
            local_rank=0,
            exit_code=1,
            error=problem.explanation,
            root_cause=True,
            cause=str(problem.cause),
        )
        self.emit(Notice("error", f"launch failed ({problem.cause}): {problem.explanation}"))
        self.emit(NodeChanged(problem.node, NodeState.FAILED, None, problem.explanation))
        self.emit(FailureReport(record, (record,)))
        self._stop_reason = StopReason.ERROR
        self._stop.set()

    def request_stacks(self) -> None:
        """Take every rank's stacks (and flight-recorder dumps) now, in the background."""
        if self.collector is not None and not self._stop.is_set():
            self.collector.request_stacks()

    async def _follow(self, command: NodeCommand) -> None:
        node = command.node
        offset, tries = 0, 0
        scrubber = StreamScrubber(self.spec.secret_values)

        def on_chunk(raw: bytes) -> None:
            nonlocal offset
            offset += len(raw)  # where to resume on the node: its bytes, not ours
            shown(scrubber.feed(raw))

        def shown(chunk: bytes) -> None:
            if not chunk:
                return
            log = self._logs.get(node)
            if log is not None:
                log.write(chunk)
                log.flush()
            assert self.monitor is not None
            for event in self.monitor.feed(node, chunk):
                self.emit(event)

        self.emit(NodeChanged(node, NodeState.RUNNING))
        while True:
            before = offset
            try:
                code = await self.backend.follow(command, offset, on_chunk)
            except NodeLost as lost:  # its scheduler said so, maybe in another node's log
                self._scheduler_lost(lost)
                if lost.node == node:
                    return
                continue
            if code is not None or self._stop.is_set():
                break
            tries = 0 if offset > before else tries + 1
            if tries > RECONNECT_TRIES:
                self._told_lost(node, CONNECTION_LOST)
                return
            self.emit(Notice("warning", f"{node}: output stream lost, reconnecting ({tries})"))
            await asyncio.sleep(min(2.0, 0.5 * tries))
        shown(scrubber.flush())
        if node not in self._lost:  # a lost node's end, if it comes, ends nothing more
            self._node_ended(node, code)

    def _scheduler_lost(self, lost: NodeLost) -> None:
        """The scheduler says it lost a node: told once, as a node whose connection was lost
        (its processes are out of reach)."""
        if lost.node not in self._lost:
            self._lost.add(lost.node)
            self._told_lost(lost.node, f"{LOST_BY}{lost}", lost.said)

    def _told_lost(self, node: str, detail: str, how: str = "") -> None:
        """A node gone with no exit to tell it (`detail`: events.lost_words'; `how`: who said
        so, in its words, else its connection)."""
        self.emit(NodeChanged(node, NodeState.FAILED, None, detail))
        self._node_failed(node, lost=how)

    def _node_ended(self, node: str, code: int | None) -> None:
        assert self.monitor is not None
        for event in self.monitor.end_of_output(node):
            self.emit(event)
        self.node_exit[node] = code
        stopped = self._stop_reason == StopReason.OPERATOR or self.membership.drained(node)
        state = NodeState.EXITED if code == 0 else NodeState.FAILED
        if stopped and code != 0:
            state = NodeState.STOPPED  # the operator's teardown ended it, not a failure
        self.emit(NodeChanged(node, state, code))
        for event in self.monitor.node_exited(node, code, stopped):
            self.emit(event)
        if code != 0 and self._stop_reason != StopReason.OPERATOR and node not in self._absent:
            problem = self.world.never_joined(node) if self.world is not None else None
            if problem is not None:  # it waited for a node that never came: that node's
                self._world_failed(problem)
                return
            self._node_failed(node)
        elif code == 0:
            self._finished_without_absent()

    def _finished_without_absent(self) -> None:
        """An elastic job's last round has finished (each of its nodes exited 0): a node
        still running that joined no round (hung before its agent asked, or never let in)
        would keep the run open forever. It is stopped; the job finished without it."""
        if self.monitor is None or not self.membership.elastic or self._stop.is_set():
            return
        cycles = self.monitor.cycles.final()
        if not cycles or any(self.node_exit.get(n) != 0 for n in cycles[-1].nodes):
            return
        waiting = [n for n, code in self.node_exit.items() if code is None]
        if waiting and not {n for c in cycles for n in c.nodes} & set(waiting):
            said = ", ".join(waiting)
            self.emit(Notice("warning", f"{said} never joined the rendezvous: stopped"))
            self._absent.update(waiting)  # their end is no failure of the job
            self._stop.set()

    def _node_failed(self, node: str, lost: str | None = None) -> None:
        """torchrun's healthy agents would wait 300 s in their exit barrier: stop them,
        unless the job is elastic and goes on without this node (a spare may join). `lost`:
        for a node that gave no exit, who said it was lost ("": its connection)."""
        if lost is not None and self.monitor and self.monitor.one_world and not self._stop.is_set():
            # no exit came to tell it: the next round's cause is this node, not the workers
            # the console stops below
            self.monitor.cycles.node_left(node, MembershipChange.LOST, None, lost or "")
        if not self._stop.is_set() and self._goes_on_without(node):
            if lost is not None and not self.spec.ft_replicas:  # torchft's groups heal alone
                self._restarting = asyncio.ensure_future(self._restart_without(node, lost))
            return
        if self._first_failed_node is None:
            self._first_failed_node = node
            self._stop_reason = self._stop_reason or StopReason.FAILURE
            self._grace = asyncio.ensure_future(self._stop_after_grace())

    async def _restart_without(self, lost: str, how: str) -> None:
        """An elastic job's node lost by its connection (a network cut, a host gone) or as
        its scheduler said (`how`): its processes may live on out of reach, so no peer's
        connection closes, and the other nodes' workers wait for its ranks in a collective
        until the backend's timeout (gloo's: 30 minutes) while their agents see nothing wrong.
        Their workers are stopped (SIGTERM) so that the agents restart them, in a round
        without the lost node."""
        assert self.plan is not None
        survivors = [
            c for c in self.plan.commands
            if c.node != lost and c.node in self.node_exit and self.node_exit[c.node] is None
        ]  # fmt: skip
        if not survivors:
            return
        said = ", ".join(c.node for c in survivors)
        self.emit(Notice("warning", f"{lost}: {how or CONNECTION_LOST}; the workers on "
                         f"{said} wait for its ranks: stopping them so that torchrun restarts "
                         f"them without {lost}"))  # fmt: skip
        for command in survivors:
            try:
                done = await self.backend.kill_rank(command, None, signal.SIGTERM)
            except BackendError as exc:
                self.emit(Notice("error", f"{exc}: its workers wait on for {lost}"))
                continue
            self.emit(Notice("info", done))

    def _goes_on_without(self, node: str) -> bool:
        goes_on, spare = self.membership.node_left(node, self.node_exit)
        if spare is not None:
            asyncio.ensure_future(self._join(spare))
        return goes_on

    async def _join(self, spare: NodeCommand) -> None:
        """A spare host starts the job's command: it joins the agents' next round."""
        self.node_exit[spare.node] = None
        if self.monitor is not None:
            self.monitor.cycles.node_joined(spare.node)
        try:
            await self._start_node(spare)
        except BackendError as exc:
            self.node_exit[spare.node] = 1
            self.emit(Notice("error", f"spare {spare.node} could not start: {exc}"))
            return
        self.membership.joined(spare, self.node_exit)
        self._followers.append(asyncio.ensure_future(self._follow(spare)))
        self._followed.set()

    async def _stop_after_grace(self) -> None:
        """Stop the nodes still running once they had FAILURE_GRACE_S to report their own
        failure. A node whose agent is winding down by itself (one of its ranks failed) is not
        cut off while it prints torchrun's failure summary, which holds the exit codes; only
        nodes that would wait in the exit barrier need stopping."""
        await asyncio.sleep(FAILURE_GRACE_S)
        deadline = time.monotonic() + WIND_DOWN_S
        while time.monotonic() < deadline and not self._stop.is_set():
            running = [node for node, code in self.node_exit.items() if code is None]
            if not running or self.monitor is None:
                break
            if not all(self.monitor.winding_down(node) for node in running):
                break
            await asyncio.sleep(0.2)
        self._stop.set()

    async def _release_followers(self) -> None:
        for task in self._followers:
            task.cancel()
        for node in self.node_exit:
            if self.node_exit[node] is None:
                self.emit(NodeChanged(node, NodeState.DETACHED))
        await self.backend.detach()
        self._close_logs()

    async def _teardown(self) -> None:
        if self._drill is not None:  # its report first: the teardown's proof follows it
            with contextlib.suppress(Exception):
                await self._drill
        if self.monitor is not None and self._stop_reason == StopReason.OPERATOR:
            self.monitor.teardown_started()
        if self.collector is not None:
            await self.collector.at_teardown()
        if self.plan is not None:
            for c in self.plan.commands:
                if self.node_exit.get(c.node) is None:
                    self.emit(NodeChanged(c.node, NodeState.STOPPING))
            await asyncio.gather(*(self._reap(c) for c in self.plan.commands))
            followers = self._followers
            if followers:
                _, pending = await asyncio.wait(followers, timeout=DRAIN_S)
                for task in pending:
                    task.cancel()
        with contextlib.suppress(BackendError):
            await self.backend.release()
        self._close_logs()

    async def _reap(self, command: NodeCommand) -> None:
        """One node's teardown, its proof sent as it comes, not once the slowest is done."""
        report = await self.backend.reap(command)
        self.teardown_reports[report.node] = report
        self.emit(report)

    def _close_logs(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    def _verdict(
        self,
        ok: bool,
        stopped_by: StopReason,
        told: MonitorSummary | None,
        ranks: Sequence[RankSummary],
        ended_by: str | None,
    ) -> VerdictReport | None:
        """The run's one verdict: for a run that failed (the scheduler's, where it ended
        the job), or that the operator stopped after it stalled or mismatched (a healthy run
        torn down has none)."""
        if ok or self._detach or self.monitor is None or told is None:
            return None
        said = scheduler_verdict(ended_by, ranks) if ended_by else None
        if said is not None:
            return VerdictReport(said, final=True)
        stuck = told.stall is not None or told.recorder is not None
        if stopped_by == StopReason.OPERATOR and not (stuck or self.monitor.mismatches()):
            return None
        return self.monitor.final_verdict()

    def _scheduler_end(self) -> str | None:
        """The scheduler's word on the job's end (signatures.scheduler_end), from the tail of
        each node's log where the logs are written on this machine (Slurm's)."""
        if self.plan is None or not self.backend.logs_written_locally:
            return None
        logs = {c.node: self.run.node_log(c.index, c.node) for c in self.plan.commands}
        for out in sorted(self.run.path.glob("slurm-*.out")):  # a batch job's own output
            logs[out.name] = out
        tails = {}
        for name, path in logs.items():
            with contextlib.suppress(OSError), open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
                tails[name] = f.read().decode(errors="replace").splitlines()
        return scheduler_end(tails)

    async def _finish(self, detail: str) -> RunSummary:
        detail = detail or self._launch_failure
        # the launch failed (or the backend's error came before any rank ran): the story's lead
        failed = detail or ("" if self.story.ran else self._last_error)
        if failed and not self._detach:
            self._emit_all(self.story.launch_failed(failed))
        told = self.monitor.summary() if self.monitor else None
        ranks = told.ranks if told else ()
        clean = all(r.clean for r in self.teardown_reports.values())
        ok = (
            not detail
            and not self._detach
            and bool(ranks)
            and all(r.state == RankState.DONE and r.exit_code == 0 for r in ranks)
            and clean
        )
        cycles = told.cycles if told else ()
        elastic_ok = self.membership.finished_ok(cycles, self.node_exit)
        if elastic_ok is not None and not detail and not self._detach and not self._stop_reason:
            # the nodes lost on the way are history, not the outcome: a host lost by its
            # connection cannot be proven clean (said in its teardown line), the rest must be
            last = set(cycles[-1].nodes) if cycles else set()
            went_on = all(r.clean for n, r in self.teardown_reports.items() if n in last)
            ok = elastic_ok and went_on
            if ok and self.spec.ft_replicas:
                detail = self.membership.ft_outcome(told.quorums if told else ())
            elif ok:
                detail = outcome.elastic_finish(cycles, sorted(self._absent))
        stopped_by = self._stop_reason or StopReason.FINISHED
        ended_by = self._scheduler_end()
        if ok and ended_by and lost_node(ended_by) in self._lost:
            ended_by = None  # it went on without the node Slurm lost (elastic): told as it came
        if ended_by and not self._detach:  # preempted, timed out, a node lost: the lead
            self._emit_all(self.story.scheduler_ended(ended_by))
            detail = ended_by + (f"; {detail}" if detail else "")
            stopped_by = StopReason.FAILURE if stopped_by == StopReason.FINISHED else stopped_by
            ranks = outcome.marked_by_lead(self.story.lead(), ranks)
        if self._detach and not detail:
            detail = outcome.detached(self.run_id, self._keeps_watch())
        elif stopped_by == StopReason.OPERATOR and not detail:
            stall, recorder = (told.stall, told.recorder) if told else (None, None)
            detail = outcome.operator_stop(ranks, stall, recorder, self._drill is not None)
        elif not detail and told and told.culprit:
            cell = outcome.first_blamed(self.story.lead(), told.culprit, ranks)
            # None: the lead blames ranks that did not fail, and says it alone
            detail = outcome.failed_first(cell, self._last_error) if cell is not None else ""
        verdict = self._verdict(ok, stopped_by, told, ranks, ended_by)
        if verdict is not None:
            self.emit(verdict)
        self._emit_all(self.story.ended())
        if not self._detach:
            detail = self.story.told_first(ok, detail)
        summary = RunSummary(
            ok,
            cycles[-1].world_size
            if (len(cycles) > 1 or self.membership.elastic) and cycles[-1].world_size
            else (self.spec.world_size),  # an elastic job's world is its last round's
            ranks,
            str(self.run.path),
            self.run_id,
            detail,
            detached=self._detach,
            stopped_by=stopped_by,
            failures=told.failures if told else (),
            stall=told.stall if told else None,
            flight_recorder=told.recorder if told else None,
            verdict=verdict.verdict if verdict else None,
            straggler=told.straggler if told else None,
            metrics=told.metrics if told else {},
            cycles=cycles,
            quorums=told.quorums if told else (),
            incidents=tuple(self.story.incidents),
            headline=detail.split("\n", 1)[0],
            goodput=self.goodput.final(time.time()),
        )
        if self.notifier is not None:  # told before the summary is said: its notices too
            await self.notifier.run_ended(summary, self.story.lead())
        self._phase_changed(self.phase.ended(summary))
        self.emit(summary)
        self.run.write_summary(summary.to_dict())
        if self.watching:
            end_watch(self.run)
        elif self._keeps_watch():
            self._keep_watch_detached()
        self.run.close()
        return summary

    def _keeps_watch(self) -> bool:
        """A detached run that notifies gets a watcher, unless this is the watcher (it
        detaches only to give way to a console)."""
        return self._detach and self.notifier is not None and not self.watching

    def _keep_watch_detached(self) -> None:
        """A detached run that notifies is not left unwatched: a watcher follows it now."""
        watcher = start_watcher(self.run)
        if watcher is None:
            self.emit(Notice("warning", "no watcher could start: nothing notifies until "
                             f"`ddptui attach {self.run_id}` follows the run"))  # fmt: skip
            return
        self.emit(
            Notice(
                "info",
                f"PID {watcher.pid} keeps watch on run {self.run_id} to notify "
                f"(its events: {self.run.path / WATCHER_LOG}); `ddptui attach` takes over",
            )
        )
