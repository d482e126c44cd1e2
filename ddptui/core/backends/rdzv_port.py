"""Provides the rendezvous port held on its node, as the console tells it.

The node helper's `launch` on the first node checks the port before it starts anything and,
when the port is held, answers one line `port-taken REPORT` (netinfo.port_report as JSON: who
holds it, a port free there) instead of its start report.
"""

from __future__ import annotations

import json
from typing import Any

PORT_TAKEN = "port-taken "


def port_taken(report: str) -> dict[str, Any] | None:
    """The port report in a node's start report, when the port was held there."""
    if not report.startswith(PORT_TAKEN):
        return None
    taken: dict[str, Any] = json.loads(report[len(PORT_TAKEN) :])
    return taken


def refusal(node: str, report: dict[str, Any]) -> str:
    """`port 29400 on node1 is in use by PID 4242 (user alice, ...): ...`, for the operator."""
    free = report.get("free_port")
    tip = f" ({free} is free there now)" if free else ""
    return (
        f"port {report['port']} on {node} is {report.get('why') or report['error']}: "
        f"the rendezvous cannot be served there; choose another with --rdzv-port{tip}"
    )
