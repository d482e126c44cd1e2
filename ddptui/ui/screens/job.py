"""Provides JobScreen: the job, its rank grid and node logs, and the session that runs it."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import ClassVar

from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Header
from textual.worker import Worker, WorkerState

from ddptui.core.events import NodeState, Notice, RankChanged
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.process import SessionProcess, call_on_loop, prepare_spare
from ddptui.ui.messages import (
    AllocationUpdate,
    FailureUpdate,
    GpuUpdate,
    NodeUpdate,
    NoticeUpdate,
    RankUpdates,
    SummaryUpdate,
    TeardownUpdate,
)
from ddptui.ui.preview import CommandLine, node_names, plan_lines, preview_lines
from ddptui.ui.rank_notices import rank_notices
from ddptui.ui.relay import SessionRelay
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.job_navigation import RankNavigation
from ddptui.ui.screens.job_stall import StallActions
from ddptui.ui.screens.log_keys import LogScreen
from ddptui.ui.widgets.footer import SteadyFooter
from ddptui.ui.widgets.gpu_panel import GpuPanel
from ddptui.ui.widgets.job_panel import JobPanel
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from ddptui.ui.widgets.prompt import PromptBar
from ddptui.ui.widgets.rank_details import RankDetails
from ddptui.ui.widgets.rank_grid import RankGrid, RankSelected
from ddptui.ui.widgets.root_cause import RootCausePanel
from ddptui.ui.widgets.run_outcome import RunOutcome, StopRequest
from ddptui.ui.widgets.stack_groups import StackGroupsPanel

FLUSH_INTERVAL_S = 1 / 15
DETAILS_INTERVAL_S = 1.0  # the chosen rank's step rate moves without any state change
NARROW_WIDTH, SHORT_HEIGHT = 120, 32
PREVIEW_NOTE = "each node will run (run id and port are chosen at launch):"


class JobScreen(StallActions, RankNavigation, LogScreen):
    """Owns the session (its process): launches it, renders its events, tears it down."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "launch", "Launch", id="job.launch"),
        Binding("t", "teardown", "Tear down", id="job.teardown"),
        Binding("d", "detach", "Detach", id="job.detach"),
        Binding("E", "jump_error", "Jump to error", id="diag.jump_error"),
        Binding("c", "toggle_commands", "Commands", show=False, id="job.commands"),
        Binding("J", "open_prompt('goto')", "Go to rank", show=False, id="grid.goto"),
        Binding("s", "take_stacks", "Stacks", id="diag.stacks"),
        Binding("K", "rank_stack", "Rank's stack", show=False, id="diag.rank_stack"),
        Binding("u", "toggle_gpus", "GPUs", show=False, id="gpu.panel"),
    ]

    class RunEnded(Message):
        """The session's worker is over: the run finished, was torn down, or was detached."""

        def __init__(self, summary: RunSummary | None, detached: bool) -> None:
            super().__init__()
            self.summary = summary
            self.detached = detached

        @property
        def ok(self) -> bool:
            return self.detached or (self.summary is not None and self.summary.ok)

    def __init__(self, spec: JobSpec, attach: RunDir | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.attach = attach
        self.session: SessionProcess | None = None  # the session's process: ask it through this
        self.relay = SessionRelay(self._post_from_session)
        self._ui_loop: asyncio.AbstractEventLoop | None = None
        self.summary: RunSummary | None = None
        self._stop_request: StopRequest = None
        self._plan_adopted = False
        self._worker: Worker[RunSummary] | None = None
        commands, note, nodes = self._initial_commands()
        self.job_panel = JobPanel(spec, commands, note, id="job")
        self.grid = RankGrid(nodes, spec.nproc_per_node, id="ranks")
        self.outcome = RunOutcome(id="outcome")
        self.root_cause = RootCausePanel(id="root-cause")
        self.stacks = StackGroupsPanel(id="stacks")
        self.details = RankDetails(id="rank-details")
        self.gpus = GpuPanel(id="gpus")
        self._gpu_flags: set[tuple[str, int | None, str]] = set()
        self.logs = NodeLogDeck(nodes, id="logs")
        self.prompt = PromptBar(id="prompt")
        self.ranks: dict[tuple[str, int], RankChanged] = {}
        self.selected: tuple[str, int] | None = None
        self._jumps = 0

    def _initial_commands(self) -> tuple[list[CommandLine], str, list[str]]:
        if self.attach is not None:
            plan, _state = self.attach.read_plan()
            return plan_lines(plan), f"run {plan.run_id} runs:", list(plan.node_names)
        try:
            return preview_lines(self.spec), PREVIEW_NOTE, node_names(self.spec)
        except Exception as exc:  # a preview must never keep the console from opening
            return [], f"no preview of the commands: {exc}", node_names(self.spec)

    def compose(self) -> ComposeResult:
        yield Header()
        self.job_panel.border_title = "Job"
        yield self.job_panel
        with Horizontal(id="board"):
            with VerticalScroll(id="side") as side:
                side.border_title = "Ranks"
                yield self.grid
                yield self.details
                yield self.gpus
                yield self.stacks
                yield self.root_cause
                yield self.outcome
            yield self.logs
        yield self.prompt
        yield SteadyFooter()

    def on_resize(self, event: events.Resize) -> None:
        """Narrow or short terminals give the logs the room (app.tcss)."""
        self.set_class(event.size.width < NARROW_WIDTH, "-narrow")
        self.set_class(event.size.height < SHORT_HEIGHT, "-short")

    def on_mount(self) -> None:
        self._ui_loop = asyncio.get_running_loop()
        self.sub_title = f"profile {self.spec.profile} · backend {self.spec.backend} · not launched"
        self.set_interval(FLUSH_INTERVAL_S, self._flush_logs)
        self.set_interval(DETAILS_INTERVAL_S, self.refresh_details)
        self.logs.active_view.focus()
        self.call_after_refresh(self._learn_keys)
        prepare_spare()  # the next launch's session process, its imports done meanwhile
        if self.attach is not None:
            self._start(self._new_session(self.attach))

    # -- state the app and the footer ask about -----------------------------------------

    @property
    def job_active(self) -> bool:
        """A session is running (launching, following, or tearing down)."""
        return self._worker is not None and not self._worker.is_finished

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "launch":
            return None if self.job_active else True
        if action in ("teardown", "detach"):
            return True if self.job_active else None
        return True

    # -- actions ----------------------------------------------------------------------------

    async def action_launch(self) -> None:
        if self.job_active:
            return
        try:
            session = self._new_session()
        except OSError as exc:
            self.notify(f"cannot create the run directory: {exc}", severity="error")
            return
        if self.session is not None:
            self.grid.reset()
            self.logs.clear()
            self.root_cause.reset()
            self.ranks.clear()
            self.selected, self._jumps = None, 0
            self.details.show_rank(None)
        self._start(session)

    def action_teardown(self) -> None:
        if not self.job_active or self.session is None:
            return
        question = f"Tear down run {self.session.run_id}? Every process on every node is stopped."
        self.app.push_screen(ConfirmScreen(question, "Tear down"), self._teardown_confirmed)

    def _teardown_confirmed(self, yes: bool | None) -> None:
        if yes:
            self.teardown()

    def action_detach(self) -> None:
        if not self.job_active or self.session is None:
            return
        question = (
            f"Detach from run {self.session.run_id}? It keeps running on the nodes; "
            f"`ddptui attach {self.session.run_id}` follows it again."
        )
        self.app.push_screen(ConfirmScreen(question, "Detach"), self._detach_confirmed)

    def _detach_confirmed(self, yes: bool | None) -> None:
        if yes:
            self.detach()

    def action_toggle_commands(self) -> None:
        self.job_panel.fold(not self.job_panel.folded)

    def _learn_keys(self) -> None:
        """Panels that name a key show the one the keymap gives it."""
        key_for = getattr(self.app, "key_for", None)
        if key_for is not None:
            self.root_cause.jump_key = key_for("diag.jump_error")
            self.job_panel.commands_key = key_for("job.commands")
            self.stacks.keys = (key_for("diag.stacks"), key_for("diag.rank_stack"))

    def save_dir(self) -> Path | None:
        return self.session.run.path / "saved" if self.session is not None else None

    def teardown(self) -> None:
        """Stop the job on every node; the reports arrive as TeardownReport events."""
        if self.session is not None and self.job_active:
            self.session.request_teardown()
            self._stop_request = self._stop_request or "teardown"
            self.outcome.set_phase("tearing down")

    def detach(self) -> None:
        if self.session is not None and self.job_active:
            self._stop_request = "detach"
            self.session.request_detach()
            self.outcome.set_phase("detaching")

    # -- the session ------------------------------------------------------------------------

    def _new_session(self, run: RunDir | None = None) -> SessionProcess:
        return SessionProcess(self.spec, self.relay.emit, self.relay.take_block, run=run)

    def _start(self, session: SessionProcess) -> None:
        self.session = session
        self.summary = None
        self._stop_request = None
        self._plan_adopted = False
        self.outcome.reset(session.run_id, str(session.run.path))
        self.outcome.set_phase("attaching" if session.attaching else "launching")
        self.job_panel.fold(True)
        self.sub_title = (
            f"profile {self.spec.profile} · backend {self.spec.backend} · run {session.run_id}"
        )
        self._worker = self._run_session(session)
        self.refresh_bindings()

    @work(exclusive=True, group="session", exit_on_error=False)
    async def _run_session(self, session: SessionProcess) -> RunSummary:
        """The session runs in a process of its own, so that its ingest never holds up keys."""
        return await session.serve()

    def _post_from_session(self, message: Message) -> None:
        """The relay's way to the screen, from the session process's reader thread."""
        call_on_loop(self._ui_loop, partial(self.post_message, message))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker is not self._worker or not event.worker.is_finished:
            return
        prepare_spare()  # for a launch again
        self._flush_logs()
        result = event.worker.result
        if event.state == WorkerState.SUCCESS and self.summary is None and result is not None:
            # The worker can finish before the summary's message is handled: show it now.
            self.on_summary_update(SummaryUpdate(result))
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.outcome.add_notice(Notice("error", f"the session stopped: {error!r}"))
            self.outcome.set_phase("crashed")
        self.refresh_bindings()
        self.post_message(self.RunEnded(self.summary, self._stop_request == "detach"))

    async def _adopt_plan(self) -> None:
        """Once the backend has built its plan, show the commands that really run."""
        if self._plan_adopted or self.session is None or self.session.plan is None:
            return
        self._plan_adopted = True
        plan = self.session.plan
        self.job_panel.show_commands(
            plan_lines(plan), f"run {plan.run_id}, rendezvous {plan.rdzv_endpoint}; each node runs:"
        )
        self.grid.set_nodes(plan.node_names, plan.nproc_per_node)
        await self.logs.set_nodes(plan.node_names)

    def _flush_logs(self) -> None:
        entries, dropped = self.relay.drain()
        if entries or dropped:
            self.logs.append(entries, dropped)

    # -- session events, as messages ----------------------------------------------------

    def on_rank_updates(self, message: RankUpdates) -> None:
        changes = message.take()
        notes = rank_notices(self.ranks, changes, self.grid.nproc_per_node)
        if notes:
            self._flush_logs()
            self.logs.append(notes)
        for event in changes:
            self.ranks[(event.node, event.local_rank)] = event
            self.root_cause.show_rank(event)
        self.grid.show_ranks(changes)
        self.stall_progress(changes)
        if self.selected is not None:
            self._show_details()

    def on_gpu_update(self, message: GpuUpdate) -> None:
        """A node's GPUs: into the grid's cells and the panel; a new flag also as a notice."""
        event = message.event
        self.grid.show_gpu(event)
        self.gpus.show_report(event)
        for flag in event.flags:
            key = (event.node, flag.rank, flag.kind)
            if key not in self._gpu_flags:
                self._gpu_flags.add(key)
                self.outcome.add_notice(Notice("warning", f"{event.node}: {flag.detail}"))

    def action_toggle_gpus(self) -> None:
        """The GPU panel: every GPU's utilisation and memory over the run."""
        if self.gpus.toggle():
            self.gpus.scroll_visible()

    def on_failure_update(self, message: FailureUpdate) -> None:
        self.root_cause.show_failures(message.event.ordered)

    def on_rank_selected(self, message: RankSelected) -> None:
        """A click chooses the rank `jump to error` goes to; a second click unchooses it."""
        chosen = (message.node, message.local_rank)
        self._choose(None if self.selected == chosen else chosen)

    async def on_node_update(self, message: NodeUpdate) -> None:
        await self._adopt_plan()
        event = message.event
        self.grid.show_node(event.node, event.state, event.exit_code)
        self.logs.show_state(event.node, event.state, event.exit_code)
        if event.state == NodeState.RUNNING and self.outcome.phase in ("launching", "attaching"):
            self.outcome.set_phase("running")
        elif event.state == NodeState.STOPPING and self._stop_request != "detach":
            self.outcome.set_phase("tearing down")
        if event.state == NodeState.FAILED and event.detail:
            self.outcome.add_notice(Notice("error", f"{event.node}: {event.detail}"))

    def on_allocation_update(self, message: AllocationUpdate) -> None:
        event = message.event
        nodes = ", ".join(event.nodes)
        text = f"allocation {event.state}" + (f": {nodes}" if nodes else "")
        if event.detail:
            text += f" ({event.detail})"
        self.outcome.add_notice(Notice("info", text))

    def on_teardown_update(self, message: TeardownUpdate) -> None:
        self.outcome.add_report(message.event)

    def on_notice_update(self, message: NoticeUpdate) -> None:
        notice = message.event
        self.outcome.add_notice(notice)
        if notice.level in ("error", "warning"):
            self.notify(notice.message, severity=notice.level)  # type: ignore[arg-type]

    def on_summary_update(self, message: SummaryUpdate) -> None:
        if self.summary is message.event:
            return
        self.summary = message.event
        summary = message.event
        self.outcome.set_summary(summary, stopped_by=self._stop_request)
        if self._stop_request == "detach":
            self.outcome.set_phase("detached")
        elif summary.ok:
            self.outcome.set_phase("finished")
        else:
            self.outcome.set_phase("torn down" if self._stop_request == "teardown" else "failed")
