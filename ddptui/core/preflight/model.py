"""Provides what preflight observes of the nodes, its findings, and the rules' helpers."""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddptui.core.job.plan import NodeTarget

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
STATUSES = (OK, WARN, FAIL, SKIP)
CHECKS = (
    "reachable",
    "python",
    "torch",
    "gpu",
    "settings",  # NCCL and the NCCL_*/GLOO_* environment, the same on every node
    "rdzv-port",
    "hostname",
    "clock",
    "disk",
    "script",
    "gang",  # a short all-reduce across the job's processes, launched as the job is
)
MAX_SKEW_S = 2.0
MIN_FREE = 1 << 30
LOW_FREE = 5 << 30
_RANK = {SKIP: 0, OK: 1, WARN: 2, FAIL: 3}


@dataclass(frozen=True)
class Finding:
    node: str
    check: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class Observations:
    """What the nodes told preflight, as they told it."""

    nodes: list[NodeTarget]
    port: int
    backend: str = "ssh"
    nproc_per_node: int = 1
    launcher: str = "torchrun"
    container: str | None = None
    script: str | None = None
    unreachable: dict[str, str] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    timing: dict[str, tuple[float, float]] = field(default_factory=dict)
    resolved: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    listen: dict[str, Any] | None = None
    connects: dict[str, dict[str, Any]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the job's --env
    # Pseudo-nodes sharing one machine (local backend): they share its GPUs; else 1.
    nodes_per_machine: int = 1
    gpu_split: bool = True
    gang: Any = None  # gang.GangRun, when the all-reduce test ran
    gang_skipped: str = "not run"
    gang_min_busbw: float = 0.0  # GB/s; 0: only nodes far below the others are slow

    @property
    def live(self) -> list[NodeTarget]:
        """Nodes where the helper ran."""
        return [n for n in self.nodes if n.name in self.facts and n.name not in self.unreachable]

    def probe(self, node: str) -> dict[str, Any]:
        return dict(self.facts.get(node, {}).get("python") or {})


def worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=lambda s: _RANK[s], default=SKIP)


def skip_dead(obs: Observations, check: str) -> list[Finding]:
    live = {n.name for n in obs.live}
    return [
        Finding(n.name, check, SKIP, "node not reached") for n in obs.nodes if n.name not in live
    ]


def reference(values: dict[str, str], order: Sequence[str]) -> tuple[str, list[str]]:
    """The most common value (ties: the earliest node's), and the nodes that have it."""
    counts = Counter(values.values())
    best = max(counts.values())
    ref = next(values[n] for n in order if n in values and counts[values[n]] == best)
    return ref, [n for n in order if values.get(n) == ref]


def on_nodes(nodes: list[str]) -> str:
    return nodes[0] if len(nodes) == 1 else f"{nodes[0]} and {len(nodes) - 1} other(s)"


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit in ("B", "KiB") else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False
