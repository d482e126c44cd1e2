"""Provides the backends' errors: nodes not had, a node's start refused, a port or a script."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddptui.core.backends.rdzv_port import refusal


class BackendError(RuntimeError):
    """Nodes could not be had or reached; the message is for the operator, on one line."""


class NodeLost(BackendError):
    """A node of the running job is gone, as its scheduler said (the message: its words),
    read in the log of the node being followed (`node`, or another: the scheduler's word
    may reach every node's log); raised by `follow`, which then stops reading."""

    def __init__(self, node: str, words: str, said: str) -> None:
        super().__init__(words)
        self.node = node
        self.said = said  # the scheduler's own line


class PortTaken(BackendError):
    """The rendezvous port is held on the node that serves the rendezvous (rdzv_port.py)."""

    def __init__(self, node: str, report: dict[str, Any]) -> None:
        super().__init__(refusal(node, report))
        self.node, self.report = node, report


class NodeStartError(BackendError):
    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"{node}: {message}")
        self.node = node


SCRIPT_FIX = "copy it to every node at the same path, use a shared filesystem, or --workdir"


class ScriptMissing(NodeStartError):
    """The node's job helper found no script where torchrun would look: nothing started."""

    def __init__(self, node: str, path: str) -> None:
        super().__init__(node, f"{path} not found")
        self.path = path


class ScriptRefused(BackendError):
    """The job refused before launch: its script is missing on some node, nothing of the
    job started there; bad input, as the operator's other mistakes are (exit 2)."""


def script_refusal(
    missing: Sequence[ScriptMissing], workdir: str | None = None, here: str = ""
) -> ScriptRefused:
    """One refusal for every node that lacks the script, in the preflight's words, with
    where a relative path was read from (`workdir`, else `here`: where ddptui ran)."""
    paths = sorted({m.path for m in missing})
    nodes = ", ".join(sorted({m.node for m in missing}))
    base = f"--workdir {workdir}" if workdir else f"the directory ddptui ran from, {here}"
    said = f" (a relative path is read from {base})" if workdir or here else ""
    return ScriptRefused(f"script {' / '.join(paths)} not found on {nodes}{said}: {SCRIPT_FIX}")
