"""Provides PromptBar: the one-line prompt for `:` commands, `/` searches, filters, `go to`."""

from __future__ import annotations

from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Input, Label

PromptMode = Literal["command", "search", "filter", "goto"]
_PROMPT: dict[PromptMode, str] = {
    "command": ":",
    "search": "/",
    "filter": "filter ",
    "goto": "go to ",
}
_HINT: dict[PromptMode, str] = {
    "command": "launch, teardown, q, filter …, search …, node NAME, w (save), wrap, help",
    "search": "regular expression (lower case: any case); n / N for the next / previous",
    "filter": "node:NAME rank:R (or 0-3, 1,5) and a regular expression; empty: no filter",
    "goto": "a node (local1), a rank (r5 or 5), or a node's local rank (local1/2)",
}


class PromptInput(Input):
    """The prompt's input; escape gives up (a binding with an id, so it can be remapped)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="prompt.cancel"),
    ]

    def action_cancel(self) -> None:
        self.post_message(PromptBar.Cancelled())


class PromptBar(Horizontal):
    """Hidden until the screen opens it; posts Submitted or Cancelled and hides again."""

    DEFAULT_CSS = """
    PromptBar {
        height: 1;
        display: none;
        background: $boost;
        &.-open { display: block; }
        & > Label { width: auto; padding: 0 0 0 1; text-style: bold; }
        & > PromptInput { border: none; height: 1; padding: 0; background: $boost; }
        & > PromptInput:focus { border: none; }
    }
    """

    class Submitted(Message):
        def __init__(self, mode: PromptMode, value: str) -> None:
            super().__init__()
            self.mode = mode
            self.value = value

    class Cancelled(Message):
        pass

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.mode: PromptMode = "command"
        self._label = Label(":")
        self._input = PromptInput(id="prompt-input")

    def compose(self) -> ComposeResult:
        yield self._label
        yield self._input

    @property
    def is_open(self) -> bool:
        return self.has_class("-open")

    @property
    def value(self) -> str:
        return self._input.value

    def open(self, mode: PromptMode, value: str = "") -> None:
        self.mode = mode
        self._label.update(_PROMPT[mode])
        self._input.placeholder = _HINT[mode]
        self._input.value = value
        self._input.cursor_position = len(value)
        self.add_class("-open")
        self._input.focus()

    def close(self) -> None:
        self.remove_class("-open")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.close()
        self.post_message(self.Submitted(self.mode, event.value))

    @on(Cancelled)
    def _cancelled(self) -> None:
        self.close()
