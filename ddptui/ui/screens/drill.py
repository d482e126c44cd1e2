"""Provides DrillScreen: a preemption drill's table, each rank's exit against the grace."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from ddptui.core.session.drill import DrillReport, drill_table

TABLE_WIDTH = 74  # the table's columns inside the dialog's border and padding, at 80 wide


class DrillScreen(ModalScreen[None]):
    """The drill's table as the core wrote it (drill_table), the teardown's proof following
    on the console behind it; Escape goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "dismiss", "Back", id="drill.close"),
    ]

    def __init__(self, report: DrillReport, run_id: str) -> None:
        super().__init__()
        self.report = report
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="drill-table") as scroll:
            scroll.border_title = f"Preemption drill · run {self.run_id}"
            scroll.border_subtitle = "drill.json and drill.txt in the run directory"
            yield Static("\n".join(drill_table(self.report, TABLE_WIDTH)), markup=False)
        yield Footer()
