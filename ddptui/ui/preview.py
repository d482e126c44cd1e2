"""Provides the per-node command preview shown before launch, from the backend's own plan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddptui.core.job.plan import LaunchPlan, NodeTarget, build_plan
from ddptui.core.job.spec import JobSpec
from ddptui.core.runs.run_dir import RunDir

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


def placeholder_nodes(spec: JobSpec) -> list[NodeTarget]:
    """The nodes as far as they are known before allocation."""
    if spec.backend == "local":
        return [NodeTarget(f"local{i}", "127.0.0.1") for i in range(spec.nodes)]
    if spec.hosts:
        return [NodeTarget(host, host) for host in spec.hosts[: spec.nodes]]
    return [NodeTarget(f"<node{i}>", f"<node{i}>") for i in range(spec.nodes)]


def node_names(spec: JobSpec) -> list[str]:
    return [n.name for n in placeholder_nodes(spec)]


def preview_plan(spec: JobSpec) -> LaunchPlan:
    """The plan the backend would build; the run id and (usually) the port are sentinels.

    The local backend rewrites the launcher and working directory, so its own `plan()` is used
    rather than a copy of its rules; other backends get the generic `build_plan`.
    """
    nodes = placeholder_nodes(spec)
    port = spec.rdzv_port or _PORT_SENTINEL
    if spec.backend == "local":
        from ddptui.core.backends.local import LocalBackend

        never_created = RunDir(Path("/nonexistent") / _RUN_ID_SENTINEL)
        return LocalBackend(spec, never_created, lambda _event: None).plan(nodes, port)
    return build_plan(spec, nodes, _RUN_ID_SENTINEL, port)


def preview_lines(spec: JobSpec) -> list[CommandLine]:
    """Each node's exact shell line, with `<run-id>` and `<port>` where launch decides them."""
    plan = preview_plan(spec)
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
