"""Provides LogScreen: the keys of a screen with node logs — search, filter, views, `:` commands."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.screen import Screen

from ddptui.ui.commands import CommandError, parse_command
from ddptui.ui.keymap import declared_bindings
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from ddptui.ui.widgets.logs.log_filter import FilterError
from ddptui.ui.widgets.prompt import PromptBar, PromptMode


class LogScreen(Screen[None]):
    """A screen holding a NodeLogDeck (`self.logs`) and a PromptBar (`self.prompt`).

    Its keys act on the log that shows, wherever the focus is; those that scroll live on
    LogView itself. `:` takes any action by name (commands.py), so every binding can also be
    typed.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right_square_bracket", "next_log", "Next log", id="logs.next"),
        Binding("left_square_bracket", "prev_log", "Prev log", show=False, id="logs.prev"),
        Binding("m", "merged_log", "All nodes", show=False, id="logs.merged"),
        Binding("colon", "open_prompt('command')", "Command", id="cmd.open"),
        Binding("slash", "open_prompt('search')", "Search", id="logs.search"),
        Binding("n", "find(1)", "Next match", show=False, id="logs.search_next"),
        Binding("N", "find(-1)", "Previous match", show=False, id="logs.search_prev"),
        Binding("f", "open_prompt('filter')", "Filter", id="logs.filter"),
        Binding("F", "follow", "Follow on/off", show=False, id="logs.follow"),
        Binding("w", "wrap", "Wrap on/off", show=False, id="logs.wrap"),
        Binding("T", "timestamps", "Timestamps on/off", show=False, id="logs.timestamps"),
        Binding("S", "save_log", "Save the visible log", show=False, id="logs.save"),
        Binding("A", "agent_lines", "torchrun/torchft lines on/off", show=False, id="logs.agent"),
        Binding("z", "fold", "Fold repeats on/off", show=False, id="logs.fold"),
    ]

    logs: NodeLogDeck
    prompt: PromptBar

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Plain text by default: log lines, paths and notices carry `[...]`, never markup."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def save_dir(self) -> Path | None:
        """Where `save` writes; None while there is no run to keep it with."""
        return None

    # -- views ------------------------------------------------------------------------------

    def action_next_log(self) -> None:
        self.logs.step(+1)

    def action_prev_log(self) -> None:
        self.logs.step(-1)

    def action_merged_log(self) -> None:
        self.logs.show(None)

    def action_follow(self) -> None:
        on = self.logs.toggle_follow()
        self.notify(f"follow {'on' if on else 'off'}", timeout=2)

    def action_wrap(self) -> None:
        self.logs.toggle_wrap()

    def action_timestamps(self) -> None:
        self.logs.toggle_timestamps()

    def action_agent_lines(self) -> None:
        on = self.logs.toggle_agent_lines()
        self.notify(f"torchrun's and torchft's own lines {'shown' if on else 'hidden'}", timeout=2)

    def action_fold(self) -> None:
        on = self.logs.toggle_fold()
        self.notify(f"merged view: repeated lines {'folded' if on else 'apart'}", timeout=2)

    def go_to(self, target: str) -> None:
        """Choose a node or rank by name; screens with a rank grid do."""
        self.logs.show(target if target in self.logs.nodes else None)

    def action_find(self, direction: int) -> None:
        if not self.logs.find(direction):
            self.notify("no search (press / first), or no match", severity="warning", timeout=3)

    def action_save_log(self) -> None:
        directory = self.save_dir()
        if directory is None:
            self.notify("nothing to save yet: launch the job first", severity="warning")
            return
        try:
            path = self.logs.save(directory)
        except OSError as exc:
            self.notify(f"cannot save the log: {exc}", severity="error")
            return
        self.notify(f"saved the visible log to {path}", timeout=8)

    # -- the prompt -------------------------------------------------------------------------

    def action_open_prompt(self, mode: PromptMode) -> None:
        view = self.logs.active_view
        initial = ""
        if mode == "filter" and view.user_filter.active:
            initial = view.user_filter.describe()
        self.prompt.open(mode, initial)

    def on_prompt_bar_cancelled(self) -> None:
        self.logs.active_view.focus()

    async def on_prompt_bar_submitted(self, message: PromptBar.Submitted) -> None:
        if message.mode == "command":
            await self.run_command(message.value)
        elif message.mode == "goto":
            if message.value.strip():
                self.go_to(message.value)
            return
        else:
            self.apply(message.mode, message.value)
        self.logs.active_view.focus()

    def apply(self, mode: PromptMode, value: str) -> None:
        """A search or a filter for the showing log; bad input is reported, not applied."""
        try:
            if mode == "search":
                count = self.logs.search(value)
                if value and not count:
                    self.notify(f"/{value}: no match in this view", severity="warning")
            else:
                self.logs.set_filter(value)
        except FilterError as exc:
            self.notify(str(exc), severity="error")

    async def run_command(self, line: str) -> None:
        """`:launch`, `:q`, `:filter rank:1`, `:node local1`..."""
        if not line.strip():
            return
        try:
            command = parse_command(line)
        except CommandError as exc:
            self.notify(str(exc), severity="error")
            return
        if command.name in ("search", "filter"):
            self.apply(command.name, command.argument)  # type: ignore[arg-type]
        elif command.name == "goto":
            self.go_to(command.argument)
        elif command.name == "node":
            if command.argument not in self.logs.nodes:
                known = ", ".join(self.logs.nodes)
                self.notify(
                    f"no node {command.argument!r}: the nodes are {known}", severity="error"
                )
            else:
                self.logs.show(command.argument)
        elif command.binding_id is not None:
            await self.run_binding(command.binding_id)

    def refusal(self, binding_id: str) -> str:
        """Why a binding hidden here is refused, in words: a read-only console says so."""
        if getattr(self, "read_only", False):
            return f"read-only: this console follows the run and cannot change it ({binding_id})"
        return f"{binding_id} is not available here"

    async def run_binding(self, binding_id: str) -> None:
        """Run what the binding with this id does, on the node that declares it."""
        for node in (self, self.app, self.logs.active_view):
            for binding in declared_bindings(type(node)):
                if binding.id == binding_id:
                    name = binding.action.partition("(")[0]
                    if node.check_action(name, ()) is False:  # hidden here (read-only, ...)
                        self.notify(self.refusal(binding_id), severity="warning")
                        return
                    await node.run_action(binding.action)
                    return
        self.notify(f"no action {binding_id!r}", severity="error")
