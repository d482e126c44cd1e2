"""Provides the backends' errors: nodes not had, a node's start refused, a port or a script."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ddptui.core.backends.rdzv_port import refusal


class BackendError(RuntimeError):
    """Nodes could not be had or reached; the message is for the operator, on one line."""


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


def script_refusal(missing: Sequence[ScriptMissing]) -> BackendError:
    """One refusal for every node that lacks the script, in the preflight's words."""
    paths = sorted({m.path for m in missing})
    nodes = ", ".join(sorted({m.node for m in missing}))
    return BackendError(f"script {' / '.join(paths)} not found on {nodes}: {SCRIPT_FIX}")
