"""Provides FormField: a labelled control with the reason its value is wrong, if it is."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Label, Static


class FormField(Vertical):
    """One field of a form; the form sets `error` ("" when the value is fine)."""

    DEFAULT_CSS = """
    FormField {
        height: auto;
        & > Horizontal { height: auto; }
        & .field-label { width: 18; padding: 0 1 0 0; text-align: right; color: $text-muted; }
        & .field-control { width: 1fr; }
        & .field-error { display: none; color: $text-error; padding-left: 18; }
        &.-invalid .field-error { display: block; }
        &.-invalid .field-label { color: $text-error; text-style: bold; }
        &.-invalid .field-control { background: $error 20%; }
    }
    """

    error: reactive[str] = reactive("")

    def __init__(self, field_id: str, label: str, control: Widget, hint: str = "") -> None:
        super().__init__(id=f"field-{field_id}")
        self.field_id = field_id
        self.label = label
        self.control = control
        self.control.add_class("field-control")
        if hint:
            self.control.tooltip = hint
        self._error = Static("", classes="field-error")

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Label(self.label, classes="field-label")
            yield self.control
        yield self._error

    def watch_error(self, error: str) -> None:
        self._error.update(f"✗ {error}" if error else "")
        self.set_class(bool(error), "-invalid")
