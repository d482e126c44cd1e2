"""Provides HistoryScreen: every recorded run (once, with its attempts); open one's logs and
grid, or run it again."""

from __future__ import annotations

import sqlite3
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Static

from ddptui.core.runs.history import RunHistory, RunRecord
from ddptui.core.runs.history_rows import HISTORY_COLUMNS, history_row
from ddptui.core.runs.settle import settle_quietly
from ddptui.ui.job_form import JobRequest
from ddptui.ui.screens.past_run import OUTCOME_STYLE, PastRunScreen, describe_record

MAX_ROWS = 500


class HistoryScreen(Screen[JobRequest | None]):
    """The run history, newest first, read afresh each time the screen is shown."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("o", "open_run", "Open run", id="history.open"),
        Binding("r", "relaunch", "Relaunch", id="history.relaunch"),
        Binding("escape", "close", "Back", id="history.close"),
    ]

    def __init__(self, history: RunHistory | None = None) -> None:
        super().__init__()
        self.history = history or RunHistory()
        self.records: dict[str, RunRecord] = {}
        self.table: DataTable[str | Text] = DataTable(
            id="runs", cursor_type="row", zebra_stripes=True
        )
        self.detail = Static("", id="run-detail")

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label(
            f"Runs recorded in {self.history.path} (enter/o: open, r: relaunch)",
            classes="dialog-note",
        )
        yield self.table
        yield self.detail
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "run history"
        self.table.add_columns(*HISTORY_COLUMNS)
        self.reload()
        self.table.focus()

    def on_screen_resume(self) -> None:
        if self.table.columns:
            self.reload()

    def reload(self) -> None:
        """Read the history again: statuses change (a run ends, a dead console is noticed,
        a local run that ended while detached is read from its run directory)."""
        settle_quietly(self.history)
        try:
            records = self.history.listing(MAX_ROWS)
        except (sqlite3.Error, OSError) as exc:
            self.detail.update(f"cannot read the history: {exc}")
            return
        selected = self.selected
        self.records = {r.id: r for r in records}
        self.table.clear()
        for record in records:
            row: list[str | Text] = list(history_row(record))
            row[6] = Text(record.status, style=OUTCOME_STYLE.get(record.status, ""))
            self.table.add_row(*row, key=record.id)
        if selected is not None and selected.id in self.records:
            self.table.move_cursor(row=self.table.get_row_index(selected.id))
        self._show_detail()
        if not records:
            self.detail.update("no runs yet: launch one with l")

    @property
    def selected(self) -> RunRecord | None:
        if not self.records or self.table.row_count == 0:
            return None
        key = self.table.coordinate_to_cell_key(self.table.cursor_coordinate).row_key
        return self.records.get(str(key.value))

    def _show_detail(self) -> None:
        record = self.selected
        if record is not None:
            self.detail.update(describe_record(record))

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_run()

    def action_open_run(self) -> None:
        record = self.selected
        if record is not None:
            self.app.push_screen(PastRunScreen(record), self._from_past_run)

    def _from_past_run(self, request: JobRequest | None) -> None:
        if request is not None:
            self.dismiss(request)

    def action_relaunch(self) -> None:
        record = self.selected
        if record is None:
            return
        try:
            spec = record.spec()
        except (OSError, ValueError) as exc:
            self.notify(f"cannot relaunch run {record.id}: {exc}", severity="error")
            return
        self.dismiss(JobRequest(spec, launch=True, again_of=record.id))

    def action_close(self) -> None:
        self.dismiss(None)
