"""Provides DdpApp: the console's Textual app — keymap, help, command palette and quitting."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.settle import settle_quietly
from ddptui.core.session.process import GC_CONSOLE_THRESHOLDS
from ddptui.ui.job_form import JobRequest
from ddptui.ui.keymap import (
    BindingScopes,
    binding_catalogue,
    describe_source,
    effective_keys,
    load_keymap,
    resolve_keymap_path,
    sequence_prefix,
    user_keymap_file,
)
from ddptui.ui.screens.confirm import ConfirmScreen, QuitChoice, QuitScreen
from ddptui.ui.screens.drill import DrillScreen
from ddptui.ui.screens.help import HelpRow, HelpScreen
from ddptui.ui.screens.history import HistoryScreen
from ddptui.ui.screens.job import JobScreen
from ddptui.ui.screens.launch_form import LaunchFormScreen
from ddptui.ui.screens.metrics import MetricsScreen
from ddptui.ui.screens.panel_screen import PanelScreen
from ddptui.ui.screens.past_run import PastRunScreen
from ddptui.ui.screens.preflight import PreflightScreen
from ddptui.ui.screens.rank_stack import RankStackScreen
from ddptui.ui.widgets.logs.log_view import LogView
from ddptui.ui.widgets.prompt import PromptInput
from ddptui.ui.widgets.side_panel import PanelScroll

# What a console following a run read-only (`ddptui serve`) does not offer: what would
# change the run, start another, or leave the run shown.
FOLLOWER_HIDES = frozenset(
    {
        "job.launch",
        "job.teardown",
        "job.detach",
        "diag.stacks",
        "logs.save",
        "app.edit",
        "app.preflight",
        "app.history",
    }
)


class DdpApp(App[int]):
    """The console; its return value is the exit code (0: no run, or the last run was ok).

    With `follow`, it shows the run `attach` names read-only, from its run directory
    (`RunFollower`): what would change the run or start another is neither offered nor done.
    """

    TITLE = "ddptui"
    CSS_PATH = "app.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("question_mark,f1", "help", "Help", id="app.help"),
        Binding("e", "edit_job", "Edit job", id="app.edit"),
        Binding("p", "preflight", "Preflight", id="app.preflight"),
        Binding("h", "history", "History", id="app.history"),
    ]

    def __init__(
        self,
        spec: JobSpec,
        keymap_path: str | Path | None = None,
        attach: RunDir | None = None,
        follow: bool = False,
        compare: str | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__()
        self.follow = follow
        self.greeting = ""  # said once the console shows
        # Read-only (k9s's --readonly): every action that changes the job or runs anything on
        # the nodes is hidden; the screens ask `read_only` in their check_action.
        self.read_only = read_only
        self.farewell = ""  # what the terminal keeps once the console is gone (`_leave`)
        self._gc_thresholds = gc.get_threshold()
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            # No sliding tab underlines or smooth scrolls: under a log flood each costs a
            # key press ~0.2 s of CPU. TEXTUAL_ANIMATIONS=full brings them back.
            self.animation_level = "none"
        self.spec = spec
        self.keymap_path = keymap_path = keymap_path or user_keymap_file()
        # Read and checked now, so a bad file is reported before the terminal is taken over.
        self.keymap = load_keymap(keymap_path, self.binding_scopes()) if keymap_path else {}
        source = resolve_keymap_path(keymap_path) if keymap_path else None
        self.keymap_source = describe_source(source) if source else "built-in defaults"
        self.attach = attach
        self.job_screen = JobScreen(spec, attach, follow=follow, compare=compare)
        self._quitting = False

    @classmethod
    def binding_scopes(cls) -> BindingScopes:
        """Which bindings are active together: a keymap must not put two on one key."""
        return {
            "console": (cls, JobScreen, LogView),
            "side panel": (PanelScroll,),
            "panel full screen": (PanelScreen,),
            "command line": (PromptInput,),
            "confirm dialog": (ConfirmScreen,),
            "quit dialog": (QuitScreen,),
            "help": (HelpScreen,),
            "rank stack": (RankStackScreen,),
            "preemption drill": (DrillScreen,),
            "launch form": (LaunchFormScreen,),
            "history": (HistoryScreen,),
            "past run": (PastRunScreen,),
            "metrics": (MetricsScreen,),
            "preflight": (PreflightScreen,),
        }

    def get_default_screen(self) -> Screen[None]:
        return self.job_screen

    def on_mount(self) -> None:
        if self.keymap:
            self.set_keymap(self.keymap)
        # For as long as the app runs, with or without a job (core/session/process.py says why).
        young, middle, old = self._gc_thresholds
        least_young, least_middle = GC_CONSOLE_THRESHOLDS
        gc.set_threshold(max(young, least_young), max(middle, least_middle), old)
        if self.greeting:
            self.notify(self.greeting, timeout=8)
        if self.follow:
            return  # a follower writes nothing of the runs' records
        # Local runs that ended while no console followed them get their outcome now.
        self.run_worker(settle_quietly, thread=True, group="settle", exit_on_error=False)

    def on_unmount(self) -> None:
        gc.set_threshold(*self._gc_thresholds)

    # -- keys, help and the command palette -------------------------------------------------

    def key_for(self, binding_id: str) -> str:
        """The keys a binding has now, as the footer shows them."""
        info = binding_catalogue(self.binding_scopes())[binding_id]
        keys = effective_keys(info, self._keymap)
        shown = "/".join(self.get_key_display(Binding(k, info.action)) for k in keys)
        prefix = sequence_prefix(binding_id)  # `g g`: the prefix key, then this one
        return f"{self.key_for(prefix)} {shown}" if prefix else shown

    def help_rows(self) -> list[HelpRow]:
        rows = [
            HelpRow(self.key_for(i.id), i.description, i.id, i.scope)
            for i in binding_catalogue(self.binding_scopes()).values()
            if not self._hidden(i.id)
        ]
        return rows + [
            HelpRow("ctrl+p", "Command palette", "(fixed)", "everywhere"),
            HelpRow("ctrl+q", "Quit (asks first while a job is running)", "(fixed)", "everywhere"),
            HelpRow("tab", "Focus the next widget", "(fixed)", "everywhere"),
        ]

    def _hidden(self, binding_id: str) -> bool:
        return self.follow and binding_id in FOLLOWER_HIDES

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.help_rows(), self.keymap_source))

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        job = self.job_screen
        ours = [
            ("job.launch", "Launch the job", "Start torchrun on every node", job.action_launch),
            (
                "job.teardown",
                "Tear down the job",
                "Stop every process of the job on every node, with proof",
                job.action_teardown,
            ),
            (
                "job.detach",
                "Detach from the job",
                "Leave the job running; `ddptui attach` follows it again",
                job.action_detach,
            ),
            ("logs.next", "Next node log", "Show the next node's log pane", job.action_next_log),
            (
                "logs.prev",
                "Previous node log",
                "Show the previous node's log pane",
                job.action_prev_log,
            ),
            (
                "app.edit",
                "Edit the job",
                "Backend, nodes, script, env, container…",
                self.action_edit_job,
            ),
            ("app.preflight", "Preflight checks", "Is every node ready?", self.action_preflight),
            ("app.history", "Run history", "Past runs: logs, grid, relaunch", self.action_history),
            ("app.help", "Help: keys", "Every binding with its key and id", self.action_help),
            ("app.quit", "Quit", "Quit; asks first while a job is running", self.action_quit),
        ]
        for binding_id, title, help_text, callback in ours:
            if self._hidden(binding_id):
                continue
            yield SystemCommand(f"{title} ({self.key_for(binding_id)})", help_text, callback)
        listed = {binding_id for binding_id, *_ in ours}
        for info in binding_catalogue(self.binding_scopes()).values():
            if self._hidden(info.id):
                continue
            if info.scope == "console" and info.id not in listed and not sequence_prefix(info.id):
                title = f"{info.description} ({self.key_for(info.id)})"
                yield SystemCommand(title, f"binding {info.id}", partial(job.run_binding, info.id))
        for command in super().get_system_commands(screen):
            if command.title not in ("Quit", "Keys"):
                yield command

    # -- the job: edit, check, past runs -------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.read_only and action in ("edit_job", "preflight"):
            return False
        if action in ("edit_job", "preflight", "history"):
            if self.follow:
                return False
            if self.screen is not self.job_screen:
                return False  # hidden on the other screens
            if action != "history" and self.job_screen.job_active:
                return None  # shown, disabled while a job runs
        return True

    def _job_is_free(self, what: str) -> bool:
        if self.job_screen.job_active:
            self.notify(f"a job is running: tear it down or detach before {what}")
            return False
        return True

    def action_edit_job(self) -> None:
        if not self.follow and self._job_is_free("editing the job"):
            self.push_screen(LaunchFormScreen(self.job_screen.spec), self.use_job)

    def action_preflight(self) -> None:
        if not self.follow and self._job_is_free("checking the nodes"):
            self.push_screen(PreflightScreen(self.job_screen.spec))

    def action_history(self) -> None:
        if self.follow:
            return
        self.push_screen(HistoryScreen(), self.use_job)

    async def use_job(self, request: JobRequest | None) -> None:
        """Make `request.spec` the console's job (a fresh job screen), launching it if asked."""
        if request is None or not self._job_is_free("changing the job"):
            return
        self.spec = request.spec
        previous, self.job_screen = self.job_screen, JobScreen(request.spec)
        self.job_screen.again_of = request.again_of
        if previous is self.screen_stack[0]:
            # The first job screen is the default screen, which Textual cannot switch away
            # from; it stays underneath, idle, and later jobs replace the one on top.
            await self.push_screen(self.job_screen)
        else:
            await self.switch_screen(self.job_screen)
        if request.launch:
            await self.job_screen.action_launch()

    # -- quitting ---------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Every way out (q, ctrl+q, the palette) comes here: a running job is never orphaned."""
        if self._quitting or isinstance(self.screen, QuitScreen):
            return
        if self.follow:
            self.exit(0)  # the run is not this console's: it goes on as it was
            return
        if not self.job_screen.job_active:
            self._leave(0 if self.job_screen.run_ok else 1)
            return
        if self.job_screen.run_ending:
            # the run is over, or stopping as the operator asked: nothing to ask, the console
            # leaves when the session's worker ends (`RunEnded`)
            self._quitting = True
            if self.job_screen.summary is None:
                self.notify("the console leaves once the run has stopped", timeout=5)
            return
        run_id = self.job_screen.session.run_id if self.job_screen.session else "?"
        self.push_screen(QuitScreen(run_id), self._quit_chosen)

    def _quit_chosen(self, choice: QuitChoice | None) -> None:
        if choice == "cancel" or choice is None:
            return
        if not self.job_screen.job_active:
            self._leave(0 if self.job_screen.run_ok else 1)
            return
        self._quitting = True
        if choice == "teardown":
            self.job_screen.teardown()
        else:
            self.job_screen.detach()

    def on_job_screen_run_ended(self, message: JobScreen.RunEnded) -> None:
        if self._quitting:
            self._leave(0 if message.ok else 1)

    def _leave(self, code: int) -> None:
        """Exit, the last run's outcome (its teardown's proof, its result) kept in `farewell`
        for the command line to print: the screen clears, the proof stays on the terminal."""
        if self.job_screen.summary is not None:
            self.farewell = self.job_screen.outcome.describe().plain
        self.exit(code)
