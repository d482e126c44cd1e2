"""Provides JobPanel: the job being run, the exact command each node runs, and its goodput."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ddptui.core.job.spec import JobSpec
from ddptui.core.story.goodput import Goodput, Part
from ddptui.ui.preview import CommandLine
from ddptui.ui.widgets.goodput_line import GoodputLine


def describe_job(spec: JobSpec) -> Text:
    """Profile, backend, shape and script of the job, one fact per line."""
    text = Text()
    rows = [
        ("profile", f"{spec.profile}   backend {spec.backend}"),
        (
            "shape",
            f"{nodes_words(spec)} node(s) × {spec.nproc_per_node} process(es) per node"
            f" = world size {world_words(spec)}",
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


def nodes_words(spec: JobSpec) -> str:
    """`2`, or an elastic job's `2:3` (the least it goes on with, the most it asks for)."""
    elastic = spec.min_nodes is not None and spec.min_nodes != spec.nodes
    return f"{spec.min_nodes}:{spec.nodes}" if elastic else str(spec.nodes)


def world_words(spec: JobSpec) -> str:
    """`4`, or an elastic job's `2..3`."""
    if spec.min_nodes is None or spec.min_nodes == spec.nodes:
        return str(spec.world_size)
    return f"{spec.min_nodes * spec.nproc_per_node}..{spec.world_size}"


def describe_job_line(spec: JobSpec) -> Text:
    """The job in one line, for the folded panel: shape, where, script and arguments."""
    text = Text()
    shape = f"{nodes_words(spec)}×{spec.nproc_per_node} = {world_words(spec)} ranks"
    text.append(shape, style="bold")
    text.append(f" · {spec.profile}/{spec.backend} · ")
    text.append(shlex.join([spec.script, *spec.script_args]))
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
    """What will run (before launch) or what ran (after): the screen sets the commands.

    Folded, it is one line (the screen folds it once the job is launched, so the grid and
    the logs get the room); unfolded, the facts and every node's exact command. Under it, once
    the run has one, the goodput line (folded or not).
    """

    DEFAULT_CSS = """
    JobPanel {
        height: auto;
        max-height: 16;
        & > .job-facts { margin-bottom: 1; }
        & > .job-line { display: none; text-wrap: nowrap; text-overflow: ellipsis; }
        &.-folded {
            & > .job-facts, & > .job-commands { display: none; }
            & > .job-line { display: block; }
        }
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
        self.commands_key = "c"
        self._line = Static(describe_job_line(spec), classes="job-line")
        self.goodput = GoodputLine(classes="job-goodput")

    def compose(self) -> ComposeResult:
        yield self._line
        yield self.goodput
        yield self._facts
        yield self._commands

    @property
    def folded(self) -> bool:
        return self.has_class("-folded")

    def fold(self, folded: bool) -> None:
        """One line, or everything; the border says which key switches."""
        self.set_class(folded, "-folded")
        what = "commands" if folded else "fold"
        self.border_subtitle = f"{self.commands_key}: {what}" if self.commands_key else ""

    def show_goodput(self, goodput: Goodput | None, current: Part | None = None) -> None:
        """Where the run's wall time went so far (None: no run yet, the line hidden)."""
        self.goodput.show(goodput, current)

    def show_commands(self, commands: Sequence[CommandLine], note: str) -> None:
        self.commands = list(commands)
        self._commands.update(describe_commands(self.commands, note))
