"""Provides JobScreen: the job, its rank grid and node logs, and the session that runs it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Header
from textual.worker import Worker, WorkerState

from ddptui.core.diagnose.failures import jump_targets
from ddptui.core.diagnose.rhythm import rank_phase
from ddptui.core.diagnose.speed import THRESHOLD_STEP
from ddptui.core.diagnose.stall_events import QuietPhase, StepBudgets
from ddptui.core.diagnose.straggler import THRESHOLD
from ddptui.core.events import NodeState, Notice, RankChanged, RunPhase
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.compare import past_metric_runs
from ddptui.core.runs.history import RunHistory
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary
from ddptui.core.session.handle import ConsoleSession
from ddptui.core.session.membership import NodeAction, NodeActionKind
from ddptui.core.session.process import prepare_spare
from ddptui.ui.messages import (
    AllocationUpdate,
    AttemptUpdate,
    CycleUpdate,
    DrillUpdate,
    FailureUpdate,
    GoodputUpdate,
    GpuUpdate,
    IncidentUpdate,
    MembershipUpdate,
    MismatchUpdate,
    NodeUpdate,
    NoticeUpdate,
    PhaseUpdate,
    QuietPhaseUpdate,
    QuorumUpdate,
    RankUpdates,
    RecorderUpdate,
    RestartAlarmUpdate,
    SpeedUpdate,
    StacksUpdate,
    StallUpdate,
    StepBudgetsUpdate,
    StragglerUpdate,
    SummaryUpdate,
    TeardownUpdate,
    VerdictUpdate,
)
from ddptui.ui.preview import CommandLine, node_names, plan_lines, preview_lines
from ddptui.ui.rank_notices import detached_notes, rank_notices
from ddptui.ui.relay import SessionRelay
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.screens.drill import DrillScreen
from ddptui.ui.screens.log_screen import LogScreen
from ddptui.ui.screens.metrics import MetricsScreen
from ddptui.ui.screens.panel_screen import PanelScreen
from ddptui.ui.screens.rank_stack import RankStackScreen
from ddptui.ui.screens.run_controller import RunController
from ddptui.ui.widgets.cycles_panel import CyclesPanel
from ddptui.ui.widgets.footer import SteadyFooter
from ddptui.ui.widgets.gpu_panel import GpuPanel
from ddptui.ui.widgets.grid_cells import find_cell
from ddptui.ui.widgets.job_panel import JobPanel
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from ddptui.ui.widgets.prompt import PromptBar
from ddptui.ui.widgets.rank_details import RankDetails
from ddptui.ui.widgets.rank_grid import RankGrid, RankSelected
from ddptui.ui.widgets.root_cause import RootCausePanel
from ddptui.ui.widgets.run_outcome import RunOutcome
from ddptui.ui.widgets.side_panel import SidePanel
from ddptui.ui.widgets.speed_panel import SpeedPanel
from ddptui.ui.widgets.stack_groups import StackGroupsPanel

FLUSH_INTERVAL_S = 1 / 15
DETAILS_INTERVAL_S = 1.0  # the chosen rank's step rate moves without any state change
NARROW_WIDTH, SHORT_HEIGHT = 120, 32
PREVIEW_NOTE = "each node will run (run id and port are chosen at launch):"


def action_question(action: NodeAction) -> tuple[str, str]:
    """The confirmation's question and its button for an action on a node or a rank."""
    node = action.node
    if action.kind == NodeActionKind.KILL:
        return (
            f"Kill {node}'s agent (fault injection)? Its ranks end as a lost node's would; an "
            f"elastic job goes on without it (a spare joins), a fixed one fails.",
            "Kill node",
        )
    if action.kind == NodeActionKind.DRAIN:
        return (
            f"Drain {node}? Its agent is stopped and not started again; an elastic job goes "
            f"on without it, a fixed one ends.",
            "Drain node",
        )
    if action.kind == NodeActionKind.KILL_GROUP:
        return (
            f"Kill {node}'s replica group (every worker, SIGKILL, fault injection)? The other "
            f"groups go on; its torchrun starts it again and it heals from a live group.",
            "Kill group",
        )
    return (
        f"Kill local rank {action.local_rank} on {node} (SIGKILL, fault injection)? Its agent "
        f"restarts the workers if restarts are left.",
        "Kill rank",
    )


def run_went_well(summary: RunSummary | None, detached: bool) -> bool:
    """A detached run goes on (not a failure); otherwise the summary says."""
    return detached or (summary is not None and summary.ok)


class JobScreen(LogScreen):
    """The job, its ranks and its logs: renders the run its `RunController` holds, and asks it
    (launch, teardown, detach, stacks) from the keys."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "launch", "Launch", id="job.launch"),
        Binding("t", "teardown", "Tear down", id="job.teardown"),
        Binding("d", "detach", "Detach", id="job.detach"),
        Binding("E", "jump_error", "Jump to error", id="diag.jump_error"),
        Binding("c", "toggle_commands", "Commands", show=False, id="job.commands"),
        Binding("J", "open_prompt('goto')", "Go to rank", id="grid.goto"),
        Binding("s", "take_stacks", "Stacks", id="diag.stacks"),
        Binding("K", "rank_stack", "Rank's stack", show=False, id="diag.rank_stack"),
        Binding("u", "toggle_gpus", "GPUs", id="gpu.panel"),
        Binding("V", "toggle_speed", "Speed", id="speed.view"),
        Binding("P", "pause_speed", "Pause detection", show=False, id="speed.pause"),
        Binding("plus", "threshold(1)", "Threshold up", show=False, id="speed.threshold_up"),
        Binding("minus", "threshold(-1)", "Threshold down", show=False, id="speed.threshold_down"),
        Binding("M", "metrics", "Metrics", id="metrics.view"),
        Binding("r", "toggle_cycles", "Restarts", id="elastic.cycles"),
        Binding("o", "open_panel", "Panel full screen", id="panel.full_screen"),
        Binding("ctrl+k", "node_action('kill')", "Kill node", id="elastic.kill_node"),
        Binding("ctrl+t", "drill", "Preemption drill", show=False, id="job.drill"),
        Binding("ctrl+n", "node_action('drain')", "Drain node", show=False, id="elastic.drain"),
        Binding(
            "ctrl+x", "node_action('kill_rank')", "Kill rank", show=False, id="elastic.kill_rank"
        ),
        Binding(
            "ctrl+r",
            "node_action('kill_group')",
            "Kill group",
            show=False,
            id="elastic.kill_group",
        ),
        Binding(
            "full_stop",
            "footer_page",
            "More keys (the footer's next page)",
            show=False,
            id="footer.page",
        ),
    ]
    # What changes the job: hidden in read-only mode (`ddptui --read-only`), as k9s does.
    CHANGING_ACTIONS: ClassVar[frozenset[str]] = frozenset(
        {"launch", "teardown", "detach", "take_stacks", "node_action", "drill"}
    )

    class RunEnded(Message):
        """The session's worker is over: the run finished, was torn down, or was detached."""

        def __init__(self, summary: RunSummary | None, detached: bool) -> None:
            super().__init__()
            self.summary = summary
            self.detached = detached

        @property
        def ok(self) -> bool:
            return run_went_well(self.summary, self.detached)

    # What a console that follows a run read-only (`ddptui serve`) neither offers nor does.
    # Saving a log writes on the head node: a visitor's keys do not.
    CONTROL_ACTIONS = CHANGING_ACTIONS | {"save_log"}

    def __init__(
        self,
        spec: JobSpec,
        attach: RunDir | None = None,
        follow: bool = False,
        compare: str | None = None,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.attach = attach
        self.follow = follow
        self.compare = compare  # a past run to lay over the metrics view's plot
        self.again_of: str | None = None  # the run its first launch relaunches (history's r)
        self._metrics_seen = False
        self.run = RunController(spec, self.run_worker, self.post_message, follow=follow)
        commands, note, nodes = self._initial_commands()
        self.job_panel = JobPanel(spec, commands, note, id="job")
        self.grid = RankGrid(nodes, spec.nproc_per_node, id="ranks")
        self.outcome = RunOutcome(id="outcome")
        self.root_cause = RootCausePanel(id="root-cause")
        self.stacks = StackGroupsPanel(id="stacks")
        self.details = RankDetails(id="rank-details")
        self.gpus = GpuPanel(id="gpus")
        self.speed = SpeedPanel(id="speed")
        self.speed_paused = False
        self.speed_threshold = THRESHOLD
        self.cycles = CyclesPanel(id="cycles")
        self._gpu_flags: set[tuple[str, int | None, str]] = set()
        self.logs = NodeLogDeck(nodes, id="logs")
        self.prompt = PromptBar(id="prompt")
        self.footer = SteadyFooter()
        self.ranks: dict[tuple[str, int], RankChanged] = {}
        self.selected: tuple[str, int] | None = None
        self._jumps = 0
        self.quiet: QuietPhase | None = None  # the job's quiet phase, while it lasts
        self.step_budgets: StepBudgets | None = None

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
                yield self.speed
                yield self.cycles
                yield self.stacks
                yield self.root_cause
                yield self.outcome
            yield self.logs
        yield self.prompt
        yield self.footer

    def on_resize(self, event: events.Resize) -> None:
        """Narrow or short terminals give the logs the room (app.tcss)."""
        self.set_class(event.size.width < NARROW_WIDTH, "-narrow")
        self.set_class(event.size.height < SHORT_HEIGHT, "-short")

    def on_mount(self) -> None:
        self.run.on_loop()
        self.sub_title = f"profile {self.spec.profile} · backend {self.spec.backend} · not launched"
        self.set_interval(FLUSH_INTERVAL_S, self._flush_logs)
        self.set_interval(DETAILS_INTERVAL_S, self.refresh_details)
        self.logs.active_view.focus()
        self.call_after_refresh(self._learn_keys)
        if not self.follow:
            prepare_spare()  # the next launch's session process, its imports done meanwhile
        if self.attach is not None:
            self._start(self.run.new_session(self.attach))

    # -- state the app and the footer ask about -----------------------------------------

    @property
    def job_active(self) -> bool:
        """A session is running (launching, following, or tearing down)."""
        return self.run.active

    @property
    def run_ending(self) -> bool:
        """The run is over or on its way out: its summary is in, or the operator asked it to
        stop (a teardown, a detach, a drill) and the session is closing it."""
        return self.summary is not None or self.run.stop_request is not None

    @property
    def run_ok(self) -> bool:
        """What the console's exit code says of the run shown: no run, a detach or a success
        is 0. Read from the summary itself, which can be on screen before `RunEnded` is."""
        if self.summary is None and self.run.session is None:
            return True
        return run_went_well(self.summary, self.run.stop_request == "detach")

    @property
    def session(self) -> ConsoleSession | None:
        """The session's process of the run shown (None before the first launch)."""
        return self.run.session

    @property
    def summary(self) -> RunSummary | None:
        return self.run.summary

    @property
    def relay(self) -> SessionRelay:
        return self.run.relay

    @property
    def read_only(self) -> bool:
        """The app's read-only mode (or a console that follows the run): every action that
        changes the job is hidden."""
        return self.follow or bool(getattr(self.app, "read_only", False))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        hidden = self.CONTROL_ACTIONS if self.follow else self.CHANGING_ACTIONS
        if self.read_only and action in hidden:
            return False  # not offered: hidden from the footer, the help and the palette
        if action == "node_action":
            return True if self.job_active else None
        if action == "launch":
            return None if self.job_active else True
        if action in ("teardown", "detach", "drill"):
            return True if self.job_active else None
        if action == "metrics":  # in the footer once the run has printed a metric
            return self._metrics_seen  # False: hidden until then
        return True

    # -- actions ----------------------------------------------------------------------------

    def _refused(self, action: str) -> bool:
        """A read-only console refuses what would change the run, however it is asked."""
        if self.follow and action in self.CONTROL_ACTIONS:
            self.notify("read-only: this console follows the run and cannot change it", timeout=4)
            return True
        return False

    async def action_launch(self) -> None:
        if self.job_active or self._refused("launch"):
            return
        before = self.session.run if self.session is not None else None
        again = (before.attempt_of() or before.run_id) if before is not None else self.again_of
        try:
            session = self.run.new_session()
            if again:  # the same job launched again: an attempt of the same run
                session.run.mark_attempt_of(again)
        except OSError as exc:
            self.notify(f"cannot create the run directory: {exc}", severity="error")
            return
        if self.session is not None:
            self.grid.reset()
            self.logs.clear()
            self.root_cause.reset()
            self.cycles.reset()
            self.ranks.clear()
            self.selected, self._jumps = None, 0
            self.quiet = self.step_budgets = None
            self.details.show_rank(None)
        self._start(session)

    def action_teardown(self) -> None:
        if self._refused("teardown") or not self.job_active or self.session is None:
            return
        question = f"Tear down run {self.session.run_id}? Every process on every node is stopped."
        self.app.push_screen(ConfirmScreen(question, "Tear down"), self._teardown_confirmed)

    def _teardown_confirmed(self, yes: bool | None) -> None:
        if yes:
            self.teardown()

    def action_detach(self) -> None:
        if self._refused("detach") or not self.job_active or self.session is None:
            return
        question = (
            f"Detach from run {self.session.run_id}? It keeps running on the nodes; "
            f"`ddptui attach {self.session.run_id}` follows it again."
        )
        self.app.push_screen(ConfirmScreen(question, "Detach"), self._detach_confirmed)

    def _detach_confirmed(self, yes: bool | None) -> None:
        if yes:
            self.detach()

    def action_drill(self) -> None:
        """A preemption drill, once confirmed: it ends the run (core/session/drill.py)."""
        if self._refused("drill") or not self.job_active or self.session is None:
            return
        signals = "+".join(f"SIG{s}" for s in self.spec.stop_signals)
        question = (
            f"Preemption drill of run {self.session.run_id}? {signals} goes to every rank on "
            f"every node; each rank's exit is timed against the {self.spec.grace:g} s grace "
            "(SIGKILL after it), then the run is torn down."
        )
        self.app.push_screen(ConfirmScreen(question, "Drill"), self._drill_confirmed)

    def _drill_confirmed(self, yes: bool | None) -> None:
        if yes and not self.read_only:
            self.run.drill()

    def action_metrics(self) -> None:
        """The metrics view: the run's metrics plotted, a past run of this profile beside."""
        run_id = self.session.run_id if self.session is not None else ""
        try:
            past = past_metric_runs(
                RunHistory(), self.spec.profile, run_id, self.compare, self.spec.script
            )
        except (sqlite3.Error, OSError):
            past = []  # the history is a convenience: the live plot needs none of it
        self.app.push_screen(MetricsScreen(self.relay.metrics, run_id, past, self.compare))

    def action_toggle_cycles(self) -> None:
        """The restart timeline: each rendezvous round, its cause, members and steps."""
        if self.cycles.toggle():
            self.cycles.scroll_visible()

    def action_node_action(self, kind: str) -> None:
        """Kill or drain the chosen rank's node, or kill the chosen rank, once confirmed."""
        if self.read_only or not self.job_active or self.session is None:
            return
        if self.selected is None:
            self.notify("choose a rank first (click it, or go to it)", timeout=4)
            return
        node, local_rank = self.selected
        action = NodeAction(NodeActionKind(kind), node, local_rank)
        question, verb = action_question(action)
        self.app.push_screen(
            ConfirmScreen(question, verb), lambda yes: self._node_action_confirmed(yes, action)
        )

    def _node_action_confirmed(self, yes: bool | None, action: NodeAction) -> None:
        if yes and not self.read_only:
            self.run.act_on_node(action)

    def action_footer_page(self) -> None:
        self.footer.next_page()

    @property
    def side_panels(self) -> tuple[SidePanel, ...]:
        """The side panels, in the order `o` prefers when none has the focus: what explains
        a failure first."""
        return (self.root_cause, self.cycles, self.stacks, self.speed)

    def action_open_panel(self) -> None:
        """The focused side panel full screen, else the first one shown."""
        focused = self.focused
        holding = (focused, *focused.ancestors) if focused is not None else ()
        panel = next((p for p in self.side_panels if p in holding), None) or next(
            (p for p in self.side_panels if p.shown), None
        )
        if panel is None:
            self.notify("no side panel shows now (root cause, restarts, stacks, speed)", timeout=4)
            return
        self.app.push_screen(PanelScreen(panel))

    def action_toggle_commands(self) -> None:
        self.job_panel.fold(not self.job_panel.folded)

    def _learn_keys(self) -> None:
        """Panels that name a key show the one the keymap gives it."""
        key_for = getattr(self.app, "key_for", None)
        if key_for is not None:
            self.root_cause.jump_key = key_for("diag.jump_error")
            if not self.read_only and self.attach is None:
                self.outcome.offer_launch(key_for("job.launch"))
            self.job_panel.commands_key = key_for("job.commands")
            self.stacks.keys = (key_for("diag.stacks"), key_for("diag.rank_stack"))
            self.speed.keys = (
                key_for("speed.pause"),
                key_for("speed.threshold_up"),
                key_for("speed.threshold_down"),
            )

    def save_dir(self) -> Path | None:
        return self.run.save_dir()

    def action_save_log(self) -> None:
        if not self._refused("save_log"):
            super().action_save_log()

    def teardown(self) -> None:
        """Stop the job on every node; the session says the phase, the reports follow as
        TeardownReport events."""
        self.run.teardown()  # refused by a follower's controller: it has no session to ask

    def detach(self) -> None:
        self.run.detach()

    # -- the session ------------------------------------------------------------------------

    def _start(self, session: ConsoleSession) -> None:
        self.outcome.reset(session.run_id, str(session.run.path))
        self.job_panel.show_goodput(None)
        self.outcome.set_phase(RunPhase.ATTACHING if session.attaching else RunPhase.LAUNCHING)
        self.job_panel.fold(True)
        self.sub_title = (
            f"profile {self.spec.profile} · backend {self.spec.backend} · run {session.run_id}"
        )
        self.run.start(session)
        self.refresh_bindings()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker is not self.run.worker or not event.worker.is_finished:
            return
        if not self.follow:
            prepare_spare()  # for a launch again
        self._flush_logs(catch_up=True)
        result = event.worker.result
        if event.state == WorkerState.SUCCESS and self.summary is None and result is not None:
            # The worker can finish before the summary's message is handled: show it now.
            self.on_summary_update(SummaryUpdate(result))
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.outcome.add_notice(Notice("error", f"the session stopped: {error!r}"))
            self.outcome.set_phase(RunPhase.CRASHED)
        self.refresh_bindings()
        self.post_message(self.RunEnded(self.summary, self.run.stop_request == "detach"))

    async def _adopt_plan(self) -> None:
        """Once the backend has built its plan, show the commands that really run."""
        plan = self.run.new_plan()
        if plan is None:
            return
        self.job_panel.show_commands(
            plan_lines(plan), f"run {plan.run_id}, rendezvous {plan.rdzv_endpoint}; each node runs:"
        )
        self.grid.set_nodes(plan.node_names, plan.nproc_per_node)
        await self.logs.set_nodes(plan.node_names)

    def _flush_logs(self, *, catch_up: bool = False) -> None:
        """The lines the relay holds into the views: a tick takes at most its TICK_LINES,
        the oldest (the rest on the next ticks); `catch_up` (at the run's end, before rank
        notices, which come after every line before them) the newest, the rest skipped."""
        if self._metrics_seen != bool(self.relay.metrics.samples):
            self._metrics_seen = not self._metrics_seen
            self.refresh_bindings()
        entries, dropped = self.run.relay.drain(catch_up)
        if entries or dropped:
            self.logs.append(entries, dropped)

    # -- session events, as messages ----------------------------------------------------

    def on_rank_updates(self, message: RankUpdates) -> None:
        changes = message.take()
        notes = rank_notices(self.ranks, changes, self.grid.nproc_per_node)
        if notes:
            self._flush_logs(catch_up=True)
            self.logs.add_notes(notes)
        for event in changes:
            self.ranks[(event.node, event.local_rank)] = event
            self.root_cause.show_rank(event)
        self.grid.show_ranks(changes)
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

    # -- why it is slow: the speed view, the grid's marks, pause and threshold -----------

    def on_speed_update(self, message: SpeedUpdate) -> None:
        round_ = message.event
        self.speed_paused, self.speed_threshold = round_.paused, round_.threshold
        self.speed.show_round(round_)

    def on_straggler_update(self, message: StragglerUpdate) -> None:
        report = message.event
        self.grid.show_stragglers(report)
        self.speed.show_report(report)
        if report.evidence:
            self.outcome.add_notice(Notice("warning", report.evidence[0]))
        elif report.ranks == ():
            self.outcome.add_notice(Notice("info", "the stragglers recovered"))

    def action_toggle_speed(self) -> None:
        """The speed view: each rank's compute vs wait a step, and the min/max line."""
        if self.speed.toggle():
            self.speed.scroll_visible()

    def action_pause_speed(self) -> None:
        paused = not self.speed_paused
        if not self.run.set_speed(paused=paused):
            self.notify("no running job to detect stragglers in", timeout=3)
            return
        self.speed_paused = paused
        self.notify(f"straggler detection {'paused' if paused else 'resumed'}", timeout=3)

    def action_threshold(self, direction: int) -> None:
        value = round(self.speed_threshold + direction * THRESHOLD_STEP, 2)
        if not self.run.set_speed(threshold=value):
            self.notify("no running job to detect stragglers in", timeout=3)
            return
        self.speed_threshold = value
        self.notify(f"straggler threshold {value:.2f}", timeout=3)

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
        if event.state == NodeState.FAILED and event.detail:
            self.outcome.add_notice(Notice("error", f"{event.node}: {event.detail}"))

    def on_allocation_update(self, message: AllocationUpdate) -> None:
        event = message.event
        nodes = ", ".join(event.nodes)
        text = f"allocation {event.state}" + (f": {nodes}" if nodes else "")
        if event.detail:
            text += f" ({event.detail})"
        self.outcome.add_notice(Notice("info", text))

    def on_attempt_update(self, message: AttemptUpdate) -> None:
        """Said where the operator reads the run's course; history keeps every attempt."""
        began, ended = message.event.attempt, message.event.previous
        text = f"attempt {began.index} ({began.cause.value}) began"
        if ended is not None:
            text += f"; attempt {ended.index} {ended.outcome}"
        self.outcome.add_notice(Notice("info", text + (f": {began.why}" if began.why else "")))

    def on_teardown_update(self, message: TeardownUpdate) -> None:
        self.outcome.add_report(message.event)

    def on_drill_update(self, message: DrillUpdate) -> None:
        """The drill's table over the console; its headline stays among the notices."""
        report = message.event
        self.outcome.add_notice(Notice("warning" if report.killed else "info", report.headline))
        run_id = self.session.run_id if self.session is not None else ""
        self.app.push_screen(DrillScreen(report, run_id))

    def on_notice_update(self, message: NoticeUpdate) -> None:
        notice = message.event
        self.outcome.add_notice(notice)
        if notice.level in ("error", "warning"):
            self.notify(notice.message, severity=notice.level)  # type: ignore[arg-type]

    def on_summary_update(self, message: SummaryUpdate) -> None:
        if self.run.summary is message.event:
            return
        self.run.summary = message.event
        self._flush_logs(catch_up=True)  # every line before the summary shows with it
        if message.event.detached:  # the log stops here: say why, where it stops
            self.logs.append(detached_notes(self.logs.nodes, message.event.run_id))
        self.outcome.set_summary(message.event, stopped_by=self.run.stop_request)
        self.job_panel.show_goodput(message.event.goodput)

    def on_goodput_update(self, message: GoodputUpdate) -> None:
        if self.run.summary is None:  # the summary's split is the last word
            self.job_panel.show_goodput(message.event.goodput, message.event.current)

    def on_phase_update(self, message: PhaseUpdate) -> None:
        """The phase the session decided; a stall's end also clears the Stacks panel's clock."""
        event = message.event
        self.outcome.set_phase(event.phase, event.detail)
        if event.phase == RunPhase.RUNNING and self.stacks.stalled_since:
            self.stacks.show_stall(None)
        elif event.phase.final:  # a stall the run ended in is over: its clock stops
            self.stacks.end_stall(event.ts)

    # -- a stall: the Stacks panel, `s`, `K`, the flight recorder's word -------------------

    def on_cycle_update(self, message: CycleUpdate) -> None:
        self.cycles.show_cycle(message.event.cycle)

    def on_membership_update(self, message: MembershipUpdate) -> None:
        self.cycles.show_membership(message.event)

    def on_quorum_update(self, message: QuorumUpdate) -> None:
        self.cycles.show_quorum(message.event)

    def on_restart_alarm_update(self, message: RestartAlarmUpdate) -> None:
        self.cycles.show_alarm(message.event)
        self.notify(message.event.detail, severity="warning", timeout=8)

    def on_quiet_phase_update(self, message: QuietPhaseUpdate) -> None:
        event = message.event
        self.quiet = event if event.ended is None else None
        self.refresh_details()

    def on_step_budgets_update(self, message: StepBudgetsUpdate) -> None:
        self.step_budgets = message.event
        self.refresh_details()

    def on_stall_update(self, message: StallUpdate) -> None:
        event = message.event
        self.stacks.show_stall(event.ts - event.since_s)

    def on_stacks_update(self, message: StacksUpdate) -> None:
        self.stacks.show_stacks(message.event)

    def on_recorder_update(self, message: RecorderUpdate) -> None:
        self.root_cause.show_recorder(message.event)

    def on_verdict_update(self, message: VerdictUpdate) -> None:
        self.root_cause.show_verdict(message.event.verdict)

    def on_incident_update(self, message: IncidentUpdate) -> None:
        self.root_cause.show_incident(message.event)
        self.grid.show_lead(self.root_cause.lead_incident)

    def on_mismatch_update(self, message: MismatchUpdate) -> None:
        self.root_cause.show_mismatch(message.event.mismatch)

    def action_take_stacks(self) -> None:
        if self._refused("take_stacks"):
            return
        if not self.run.take_stacks():
            self.notify("no running job to take stacks of", timeout=3)
            return
        self.notify("taking every rank's stacks…", timeout=3)

    def action_rank_stack(self) -> None:
        """The chosen rank's whole stack (else the first suspect's), from the last stacks."""
        report = self.stacks.report
        if report is None or not report.ranks:
            self.notify(f"no stacks taken yet: {self.stacks.keys[0]} takes them", timeout=4)
            return
        chosen = self.ranks.get(self.selected) if self.selected else None
        rank = chosen.rank if chosen else next((g.ranks[0] for g in report.groups), None)
        found = next((r for r in report.ranks if r[0] == rank), None)
        if found is None:
            self.notify(f"no stack of rank {rank} in the last stacks", timeout=4)
            return
        rank, node, local_rank, text = found
        title = f"rank {rank} · {node} local rank {local_rank} · {report.method}"
        self.app.push_screen(RankStackScreen(title, text))

    # -- ways to a rank: its first error line (`E`), by name (`J`), its details -----------

    def action_jump_error(self) -> None:
        """Show the first error line of the chosen rank, else of each failed rank in turn.

        The order is the failures' (first observed first); each press moves on to the next.
        """
        targets = jump_targets(self.ranks, self.root_cause.failures)
        chosen = [t for t in targets if (t.node, t.local_rank) == self.selected]
        if self.selected is not None and not chosen:
            node, local_rank = self.selected
            self.notify(f"{node} local rank {local_rank} has no error line", timeout=4)
            return
        if not targets:
            self.notify("no rank has an error line (yet)", timeout=3)
            return
        if chosen:
            target = chosen[0]
        else:
            target = targets[self._jumps % len(targets)]
            self._jumps += 1
        who = f"rank {target.rank} on {target.node}" if target.rank is not None else target.node
        if self.logs.jump_to(target.node, target.seq):
            self.notify(f"{who}: {target.summary}", timeout=6)
            return
        where = self.run.node_log_path(target.node)
        self.notify(
            f"{who}: its first error line ({target.seq}) is older than the console keeps; "
            f"the full log is {where}",
            severity="warning",
            timeout=10,
        )

    def go_to(self, target: str) -> None:
        """Choose the rank `target` names (`local1`, `local1/2`, `r5`), show it in the grid
        and its node's log."""
        cell = find_cell(self.grid.rows, target)
        if cell is None:
            self.notify(f"no node or rank {target!r}", severity="error")
            return
        self._choose((cell.node, cell.local_rank))
        line = self.grid.line_of(cell.node, cell.local_rank)
        if line is not None:
            y = self.grid.virtual_region.y + line
            self.query_one("#side").scroll_to(y=max(0, y - 2), animate=False)
        self.logs.show(cell.node)

    def _choose(self, chosen: tuple[str, int] | None) -> None:
        self.selected = chosen
        self.grid.select(*(chosen or (None, 0)))
        self._show_details()

    def refresh_details(self) -> None:
        """The chosen rank's details again (its step rate moves while its state stays), and
        the job's quiet phase with its budget left above the ranks."""
        if self.selected is not None:
            self._show_details()
        quiet, said = self.quiet, ""
        if quiet is not None:
            said = f"{quiet.label} · {quiet.budget_s - (time.time() - quiet.began):.0f} s left"
        self.query_one("#side").border_subtitle = said

    def _show_details(self) -> None:
        cell = self.grid.cell(*self.selected) if self.selected is not None else None
        last, rate, phase = None, None, None
        if cell is not None:
            last = self.logs.store.last_text(cell.node, cell.rank)
            rate = self.run.step_rate(cell.node, cell.local_rank)
            phase = rank_phase(cell.rank, self.quiet, self.step_budgets)
        self.details.show_rank(cell, last, rate, phase, time.time())
