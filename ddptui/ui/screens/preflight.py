"""Provides PreflightScreen: every node of the job checked before launch, as a grid with fixes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static
from textual.worker import Worker

from ddptui.core.events import AllocationChanged, Event
from ddptui.core.job.spec import JobSpec
from ddptui.core.preflight.access import NodeAccess
from ddptui.core.preflight.preflight import CheckResult, Preflight, PreflightSummary
from ddptui.ui.preview import node_names
from ddptui.ui.widgets.preflight_grid import PreflightGrid

AccessFactory = Callable[[JobSpec, Callable[[Event], None]], NodeAccess]
_MARK = {"fail": ("✗", "bold red"), "warn": ("!", "bold yellow")}


def describe_problems(results: list[CheckResult]) -> Text:
    """Every failure and warning, each with how to fix it."""
    text = Text()
    problems = [r for r in results if r.status in _MARK]
    for i, result in enumerate(sorted(problems, key=lambda r: r.status != "fail")):
        mark, style = _MARK[result.status]
        if i:
            text.append("\n")
        text.append(f"{mark} {result.node} · {result.check}: ", style=style)
        text.append(result.detail)
        if result.fix:
            text.append("\n    fix: ", style="bold")
            text.append(result.fix)
    return text


class PreflightScreen(Screen[None]):
    """Runs the checks in a worker; results come back as messages and fill the grid."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "rerun", "Check again", id="preflight.rerun"),
        Binding("escape", "close", "Back", id="preflight.close"),
    ]

    class Checked(Message):
        """Something the preflight reported: a check result, the summary, allocation news."""

        def __init__(self, event: Event) -> None:
            super().__init__()
            self.event = event

    def __init__(
        self, spec: JobSpec, access: AccessFactory | None = None, autostart: bool = True
    ) -> None:
        super().__init__()
        self.spec = spec
        self.access = access
        self.autostart = autostart
        self.results: list[CheckResult] = []
        self.summary: PreflightSummary | None = None
        self.grid = PreflightGrid(id="preflight-grid")
        self.status = Static("", id="preflight-status")
        self.cell = Static("", id="preflight-cell")
        self.problems = Static("", id="preflight-problems")
        self._worker: Worker[PreflightSummary] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield self.status
        yield self.grid
        yield self.cell
        with VerticalScroll(id="preflight-problems-box") as box:
            box.border_title = "Failures and warnings"
            yield self.problems
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"preflight · profile {self.spec.profile} · backend {self.spec.backend}"
        if self.spec.backend != "slurm":
            self.grid.set_nodes(node_names(self.spec))
        self.grid.focus()
        if self.autostart:
            self.start()

    @property
    def running(self) -> bool:
        return self._worker is not None and not self._worker.is_finished

    def start(self) -> None:
        self.results.clear()
        self.summary = None
        self.grid.reset()
        if self.spec.backend != "slurm":
            self.grid.set_nodes(node_names(self.spec))
        self.problems.update("")
        self.cell.update("")
        self.status.update(f"checking {self.spec.nodes} node(s) from {self.spec.backend} …")
        self._worker = self._run()
        self.refresh_bindings()

    @work(exclusive=True, group="preflight", exit_on_error=False)
    async def _run(self) -> PreflightSummary:
        def emit(event: Event) -> None:
            self.post_message(self.Checked(event))

        access = self.access(self.spec, emit) if self.access else None
        gang = None
        if access is None:  # the real nodes: the gang test too (a job of its own)
            from ddptui.core.preflight.gang_runner import run_gang

            gang = functools.partial(run_gang, notify=emit)
        return await Preflight(self.spec, emit, access, gang=gang).run()

    def show(self, event: Event) -> None:
        """Render one thing the preflight reported (also how tests feed fixed results)."""
        if isinstance(event, CheckResult):
            self.results.append(event)
            self.grid.show(event)
            self.problems.update(describe_problems(self.results))
        elif isinstance(event, PreflightSummary):
            self.summary = event
            verdict = "✓ ready" if event.ok else "✗ NOT ready"
            style = "bold green" if event.ok else "bold red"
            line = Text(f"{verdict}: {event.detail}", style=style)
            if event.warnings:
                line.append(f"  ({len(event.warnings)} warning(s))", style="yellow")
            self.status.update(line)
            if not self.results or not describe_problems(self.results).plain:
                self.problems.update("none")
            self.refresh_bindings()
        elif isinstance(event, AllocationChanged):
            job = f" job {event.job_id}" if event.job_id else ""
            self.status.update(f"allocation{job} {event.state} {event.detail}".rstrip())

    def on_preflight_screen_checked(self, message: Checked) -> None:
        self.show(message.event)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker is self._worker and event.worker.is_finished:
            if event.worker.error is not None:
                self.status.update(Text(f"preflight stopped: {event.worker.error!r}", "bold red"))
            self.refresh_bindings()

    @on(DataTable.CellHighlighted)
    def _cell(self, event: DataTable.CellHighlighted) -> None:
        result = self.grid.result_at_cursor()
        if result is None:
            self.cell.update("")
            return
        text = Text(f"{result.node} · {result.check}: ", style="bold")
        text.append(result.detail)
        if result.fix:
            text.append(f"\nfix: {result.fix}")
        self.cell.update(text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "rerun":
            return None if self.running else True
        return True

    def action_rerun(self) -> None:
        if not self.running:
            self.start()

    def action_close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
        self.dismiss(None)
