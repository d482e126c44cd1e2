"""Provides JobPanel: the job being run and the exact command each node runs."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.core.job.spec import JobSpec
from ddptui.ui.preview import CommandLine


def describe_job(spec: JobSpec) -> Text:
    """Profile, backend, shape and script of the job, one fact per line."""
    text = Text()
    rows = [
        ("profile", f"{spec.profile}   backend {spec.backend}"),
        (
            "shape",
            f"{spec.nodes} node(s) × {spec.nproc_per_node} process(es) per node"
            f" = world size {spec.world_size}",
        ),
        ("script", shlex.join([spec.script, *spec.script_args])),
    ]
    if spec.env:
        shown = spec.masked().env
        rows.append(("env", " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items()))))
    if spec.container:
        rows.append(("container", f"{spec.container.engine} {spec.container.image}"))
    for i, (label, value) in enumerate(rows):
        if i:
            text.append("\n")
        text.append(f"{label:>8} ", style="bold")
        text.append(value)
    return text


def describe_commands(lines: Sequence[CommandLine], note: str) -> Text:
    text = Text()
    text.append(note, style="italic dim")
    for line in lines:
        text.append("\n")
        text.append(f"{line.node} $ ", style="bold")
        text.append(line.line)
    return text


class JobPanel(VerticalScroll):
    """What will run (before launch) or what ran (after): the screen sets the commands."""

    DEFAULT_CSS = """
    JobPanel {
        height: auto;
        max-height: 16;
        & > .job-facts { margin-bottom: 1; }
    }
    """

    def __init__(
        self, spec: JobSpec, commands: Sequence[CommandLine], note: str, *, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.spec = spec
        self.commands = list(commands)
        self._facts = Static(describe_job(spec), classes="job-facts")
        self._commands = Static(describe_commands(self.commands, note), classes="job-commands")

    def compose(self) -> ComposeResult:
        yield self._facts
        yield self._commands

    def show_commands(self, commands: Sequence[CommandLine], note: str) -> None:
        self.commands = list(commands)
        self._commands.update(describe_commands(self.commands, note))
