"""Provides PastRunScreen: a recorded run's rank grid and node logs, read back from its run dir."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from ddptui.core.events import NodeChanged
from ddptui.core.runs.history import RunRecord, recorded_events
from ddptui.core.runs.history_rows import attempt_lines
from ddptui.core.runs.run_dir import RunDir, node_log_name
from ddptui.ui.job_form import JobRequest
from ddptui.ui.widgets.goodput_line import describe_goodput
from ddptui.ui.widgets.logs.run_log_tabs import RunLogTabs
from ddptui.ui.widgets.rank_grid import RankGrid

OUTCOME_STYLE = {
    "ok": "bold green",
    "failed": "bold red",
    "error": "bold red",
    "torn down": "yellow",
    "interrupted": "bold magenta",
    "running": "cyan",
    "detached": "blue",
}


def run_layout(record: RunRecord) -> tuple[list[str], int, list[tuple[str, Path]]]:
    """The run's nodes, processes per node and log files, from its plan when it got that far."""
    run = RunDir(Path(record.run_dir))
    nodes, nproc = list(record.hosts), record.nproc_per_node
    with contextlib.suppress(OSError, ValueError, KeyError):
        plan, _state = run.read_plan()
        nodes, nproc = list(plan.node_names), plan.nproc_per_node
    if not nodes:
        nodes = [p.stem.split("-", 1)[1] for p in sorted(run.nodes_dir.glob("*.log"))]
    logs = [(node, run.nodes_dir / node_log_name(i, node)) for i, node in enumerate(nodes)]
    return nodes, nproc, logs


def describe_record(record: RunRecord) -> Text:
    text = Text()
    text.append(f"run {record.id}  ", style="bold")
    text.append(record.status, style=OUTCOME_STYLE.get(record.status, ""))
    text.append(f"   profile {record.profile} · backend {record.backend} · {record.where_text()}")
    text.append(f"\nranks {record.ranks_text()}   script {record.script}")
    if record.goodput is not None and record.goodput.wall_s > 0:
        text.append("\n")
        text.append_text(describe_goodput(record.goodput))
    if record.detail:
        text.append(f"\n{record.detail}", style="italic")
    lines = attempt_lines(record)
    if lines:
        text.append(f"\n{len(lines)} attempts:", style="bold")
    for line in lines:
        text.append(f"\n  {line}")
    text.append(f"\nrun directory {record.run_dir}", style="dim")
    return text


class PastRunScreen(Screen[JobRequest | None]):
    """What a run left: its grid as recorded and every node's full log; `r` runs it again."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "relaunch", "Relaunch", id="past.relaunch"),
        Binding("right_square_bracket", "next_log", "Next log", id="past.next_log"),
        Binding("left_square_bracket", "prev_log", "Prev log", id="past.prev_log"),
        Binding("escape", "close", "Back", id="past.close"),
    ]

    def __init__(self, record: RunRecord) -> None:
        super().__init__()
        self.record = record
        nodes, nproc, logs = run_layout(record)
        self.grid = RankGrid(nodes, nproc, id="past-ranks")
        self.logs = RunLogTabs(logs, id="past-logs")

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(describe_record(self.record), id="past-facts")
        with Horizontal(id="past-board"):
            with Vertical(id="past-side") as side:
                side.border_title = "Ranks (as recorded)"
                yield self.grid
            yield self.logs
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"run {self.record.id} · {self.record.status}"
        for event in recorded_events(Path(self.record.run_dir)):
            if isinstance(event, NodeChanged):
                self.grid.show_node(event.node, event.state, event.exit_code)
            else:
                self.grid.show_rank(event)

    def action_relaunch(self) -> None:
        try:
            spec = self.record.spec()
        except (OSError, ValueError) as exc:
            self.notify(f"cannot relaunch: the job of run {self.record.id} is not readable: {exc}")
            return
        self.dismiss(JobRequest(spec, launch=True, again_of=self.record.id))

    def action_next_log(self) -> None:
        self.logs.step(+1)

    def action_prev_log(self) -> None:
        self.logs.step(-1)

    def action_close(self) -> None:
        self.dismiss(None)
