"""Provides HelpScreen: every binding of the console, with the key it has now and its id."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Label

LEAST_DOES = 16  # the description column's least width; it wraps within it


@dataclass(frozen=True)
class HelpRow:
    keys: str
    description: str
    binding_id: str
    where: str


class HelpScreen(ModalScreen[None]):
    """A table of bindings; the app builds the rows from its keymap, so remapped keys show.

    Where each binding acts heads its rows (a row of its own, not a column), and the
    description column takes the width left by the keys and ids, wrapping within it: the
    table fits the terminal from 80 columns up, nothing cut.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Close help", id="help.close"),
    ]

    def __init__(self, rows: Sequence[HelpRow], keymap_source: str) -> None:
        super().__init__()
        self.rows = list(rows)
        self.keymap_source = keymap_source
        self._width = 0

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
        self.query_one(DataTable).focus()

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self._fill)

    def _fill(self) -> None:
        """The rows again for the table's width, when it changed."""
        table = self.query_one(DataTable)
        width = table.size.width
        if not width or width == self._width:
            return
        self._width = width
        key_w = max(cell_len(r.keys) for r in self.rows)
        id_w = max(cell_len(r.binding_id) for r in self.rows)
        padding = 2 * table.cell_padding * 3
        scrollbar = table.styles.scrollbar_size_vertical
        does_w = max(LEAST_DOES, width - key_w - id_w - padding - scrollbar)
        table.clear(columns=True)
        table.add_column("Key", width=key_w)
        table.add_column("Does", width=does_w)
        table.add_column("Binding id", width=id_w)
        groups: dict[str, list[HelpRow]] = {}
        for row in self.rows:
            groups.setdefault(row.where, []).append(row)
        for where, rows in groups.items():
            table.add_row("", Text(where, style="bold"), "")
            for row in rows:
                table.add_row(row.keys, Text(row.description), row.binding_id, height=None)
