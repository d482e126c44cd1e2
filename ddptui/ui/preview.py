"""Provides the per-node command preview shown before launch, from the backend's own plan."""

from __future__ import annotations

from dataclasses import dataclass

from ddptui.core.backends.factory import placeholder_nodes, preview_plan
from ddptui.core.job.plan import LaunchPlan
from ddptui.core.job.spec import JobSpec

RUN_ID_PLACEHOLDER = "<run-id>"
PORT_PLACEHOLDER = "<port>"
# Stand-ins that survive shlex quoting unchanged, swapped for the placeholders afterwards.
_RUN_ID_SENTINEL = "@@ddptui-run-id@@"
_PORT_SENTINEL = 0


@dataclass(frozen=True)
class CommandLine:
    """One node's command as the operator reads it."""

    node: str
    address: str
    line: str


def node_names(spec: JobSpec) -> list[str]:
    return [n.name for n in placeholder_nodes(spec)]


def preview_lines(spec: JobSpec) -> list[CommandLine]:
    """Each node's exact shell line, with `<run-id>` and `<port>` where launch decides them."""
    plan = preview_plan(spec, _RUN_ID_SENTINEL, spec.rdzv_port or _PORT_SENTINEL)
    lines = []
    for command in plan.commands:
        line = command.shell_line().replace(_RUN_ID_SENTINEL, RUN_ID_PLACEHOLDER)
        if not spec.rdzv_port:
            head = plan.rdzv_endpoint.rsplit(":", 1)[0]
            line = line.replace(f"{head}:{_PORT_SENTINEL}", f"{head}:{PORT_PLACEHOLDER}")
        lines.append(CommandLine(command.node, command.address, line))
    return lines


def plan_lines(plan: LaunchPlan) -> list[CommandLine]:
    """The commands of a launched run, exactly as they ran."""
    return [CommandLine(c.node, c.address, c.shell_line()) for c in plan.commands]
