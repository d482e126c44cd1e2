"""Provides HelpScreen: every binding of the console, with the key it has now and its id."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Label


@dataclass(frozen=True)
class HelpRow:
    keys: str
    description: str
    binding_id: str
    where: str


class HelpScreen(ModalScreen[None]):
    """A table of bindings; the app builds the rows from its keymap, so remapped keys show."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Close help", id="help.close"),
    ]

    def __init__(self, rows: Sequence[HelpRow], keymap_source: str) -> None:
        super().__init__()
        self.rows = list(rows)
        self.keymap_source = keymap_source

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Label("Keys", classes="dialog-question")
            yield Label(
                f"keymap: {self.keymap_source}  ·  ctrl+p opens the command palette",
                classes="dialog-note",
            )
            yield DataTable(cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("Key", "Does", "Binding id", "Where")
        for row in self.rows:
            table.add_row(row.keys, row.description, row.binding_id, row.where)
        table.focus()
