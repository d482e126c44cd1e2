"""Provides a torchft job's launch: one replica group per node, the Lighthouse on the first.

torchft (per-step fault tolerance across replica groups) runs one Lighthouse and, per replica
group, a torchrun of its own: the group's ranks rendezvous among themselves (`--nnodes=1` on
the group's node, its own rendezvous id), and each group's Manager finds the others through
the Lighthouse (TORCHFT_LIGHTHOUSE), told its group's id and how many groups there are
(REPLICA_GROUP_ID, NUM_REPLICA_GROUPS), as TorchTitan's docs launch it by hand in N shells.
Here the first node's command starts the Lighthouse in the background before its torchrun,
under the job's tag like every process of the node's command: the teardown's reaper stops it
and proves it gone with the rest.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from ddptui.core.job.spec import JobSpec

LIGHTHOUSE = "torchft_lighthouse"


def lighthouse_url(spec: JobSpec, head: str) -> str:
    """Where every group's Manager reaches the Lighthouse (the first node's address)."""
    host = f"[{head}]" if ":" in head else head
    return f"http://{host}:{spec.ft_lighthouse_port}"


def group_environment(spec: JobSpec, index: int, head: str) -> dict[str, str]:
    """What replica group `index`'s torchrun needs beyond the job's environment."""
    return {
        "REPLICA_GROUP_ID": str(index),
        "NUM_REPLICA_GROUPS": str(spec.ft_replicas),
        "TORCHFT_LIGHTHOUSE": lighthouse_url(spec, head),
    }


def lighthouse_argv(spec: JobSpec) -> list[str]:
    """The Lighthouse's command line: quorum from `ft_min_replicas` groups, 2 s to join."""
    return [
        LIGHTHOUSE,
        "--min_replicas",
        str(spec.ft_min_replicas),
        "--bind",
        f"[::]:{spec.ft_lighthouse_port}",
        "--join_timeout_ms",
        "2000",
    ]


def with_lighthouse(spec: JobSpec, argv: Sequence[str]) -> list[str]:
    """The first node's command: the Lighthouse in the background (its lines in the node's
    log), then the group's torchrun in the shell's place."""
    start = f'{shlex.join(lighthouse_argv(spec))} 2>&1 & exec "$@"'
    return ["sh", "-c", start, "sh", *argv]
