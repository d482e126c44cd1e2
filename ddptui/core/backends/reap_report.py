"""Provides the teardown's proof from a node's reap report, and the reap's arguments."""

from __future__ import annotations

from typing import Any

from ddptui.core.events import TeardownReport
from ddptui.core.job.plan import node_container
from ddptui.core.job.spec import JobSpec
from ddptui.core.monitor.gpu import judge_gpus

REAP_GRACE_S = 3.0
REAP_MARGIN_S = 90.0  # a reap's time beyond the job's grace (see reap_timeout)


def teardown_report(node: str, report: dict[str, Any]) -> TeardownReport:
    """The node shim's reap report as the teardown proof: processes, container, GPUs."""
    gpu = judge_gpus(report["gpu"]) if report.get("gpu") else None
    detail = f"{report['found']} process(es) found"  # reap_detail names any SIGKILLed
    detail += reap_detail(report) + (f"; {gpu.detail}" if gpu else "")
    clean = reap_clean(report) and (gpu is None or gpu.clean)
    return TeardownReport(node, clean, tuple(report["leftover"]), detail, gpu)


def reap_args(spec: JobSpec, tag: str, gpu_before: str = "", lost: bool = False) -> list[str]:
    """The node shim's `reap` arguments: the tag, the grace, the node's container, each
    GPU's memory before the job (`0:503,1:503`, MiB) when it is known, and the stop signals
    (reaper.reap). `lost`: the node is stopped as a lost node's would be (the operator's kill
    or drain of one node of a running job): SIGTERM to its agent and workers at once, so
    that the agent ends rather than restart its workers and rejoin. So is every node of a
    job with restarts stopped with the default signal: an agent with restarts left would
    restart workers stopped alone, to be killed after the grace."""
    container = node_container(spec, tag) or ("", "")
    if lost or (spec.max_restarts > 0 and tuple(spec.stop_signals) == ("TERM",)):
        return [tag, str(spec.grace), *container, gpu_before, "TERM", "agents"]
    return [tag, str(spec.grace), *container, gpu_before, ",".join(spec.stop_signals)]


def drill_args(spec: JobSpec, tag: str, at: float) -> list[str]:
    """The node helper's `drill` arguments (node/drill.py): the tag, the grace, the stop
    signals, "agents" where the teardown would signal the agents too (reap_args), and when
    to send them (`at`: seconds since the epoch, the same for every node)."""
    agents = spec.max_restarts > 0 and tuple(spec.stop_signals) == ("TERM",)
    order = "agents" if agents else ""
    return [tag, str(spec.grace), ",".join(spec.stop_signals), order, f"{at:.3f}"]


def reap_timeout(spec: JobSpec) -> float:
    """How long a node's reap may take: the grace, the agents' own end, the SIGKILL and the
    proof (a container's removal, the GPUs' memory coming back)."""
    return spec.grace + REAP_MARGIN_S


def reap_clean(report: dict[str, Any]) -> bool:
    """No process left, and no container still listed (or not proven gone)."""
    container = report.get("container")
    return not report["leftover"] and not (container and container["listed"] is not False)


def reap_detail(report: dict[str, Any]) -> str:
    """What the shim saw, in words: the container's end, and every process by name."""
    names = report.get("names", {})
    parts = []
    container = report.get("container")
    if container:
        holders = len(container["holders"])
        if container["listed"] is None:
            gone = f"{container['engine']} could not be asked whether it is gone"
        elif container["listed"]:
            gone = f"still listed by {container['engine']} ps -a"
        else:
            gone = "removed" + (f", its conmon/shim ({holders}) gone" if holders else "")
        parts.append(f"container {container['name']} {gone}")
    for what in ("killed", "leftover"):
        pids = report.get(what) or []
        if pids:
            shown = ", ".join(f"{p} ({names.get(str(p)) or '?'})" for p in pids[:5])
            more = f" and {len(pids) - 5} more" if len(pids) > 5 else ""
            label = "needed SIGKILL" if what == "killed" else "LEFT RUNNING"
            parts.append(f"{label}: {shown}{more}")
    return "".join(f"; {p}" for p in parts)
