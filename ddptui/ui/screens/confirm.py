"""Provides the modal dialogs: confirm an action, and what to do with a running job on quit."""

from __future__ import annotations

from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Label

QuitChoice = Literal["teardown", "detach", "cancel"]


class ConfirmScreen(ModalScreen[bool]):
    """Yes or no to one consequential action; dismisses with True to go ahead."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str, yes_label: str) -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.yes_label, variant="error", id="yes")
                yield Button("Cancel", id="no")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class QuitScreen(ModalScreen[QuitChoice]):
    """The job is still running: tear it down first, leave it running, or stay."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "choose('teardown')", "Tear down, then quit", id="quit.teardown"),
        Binding("d", "choose('detach')", "Detach, then quit", id="quit.detach"),
        Binding("escape", "choose('cancel')", "Cancel", id="quit.cancel"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Run {self.run_id} is still running. Quit how?", classes="dialog-question")
            yield Label(
                "Detaching leaves every node running; `ddptui attach "
                f"{self.run_id}` follows it again.",
                classes="dialog-note",
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Tear down, then quit", variant="error", id="teardown")
                yield Button("Detach, then quit", variant="warning", id="detach")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def action_choose(self, choice: QuitChoice) -> None:
        self.dismiss(choice)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        choice = event.button.id
        self.dismiss(choice if choice in ("teardown", "detach") else "cancel")  # type: ignore[arg-type]
