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
LIGHTHOUSE_PORT = 29510  # the Lighthouse's port on the first node, unless the job names one
FT_TRAINER = "ft_ddp.py"  # the bundled trainer a torchft job runs when given no script
# torchrun's restarts of a replica group's workers when the job names none: a group whose
# worker died comes back and heals from a live peer, as often as this
FT_MAX_RESTARTS = 10


def lighthouse_url(head: str, port: int) -> str:
    """Where every group's Manager reaches the Lighthouse (the first node's address)."""
    host = f"[{head}]" if ":" in head else head
    return f"http://{host}:{port}"


def group_environment(spec: JobSpec, index: int, head: str, port: int) -> dict[str, str]:
    """What replica group `index`'s torchrun needs beyond the job's environment (the
    Lighthouse on `head` at `port`)."""
    return {
        "REPLICA_GROUP_ID": str(index),
        "NUM_REPLICA_GROUPS": str(spec.ft_replicas),
        "TORCHFT_LIGHTHOUSE": lighthouse_url(head, port),
    }


def lighthouse_argv(spec: JobSpec, port: int) -> list[str]:
    """The Lighthouse's command line: quorum from `ft_min_replicas` groups, the job's waits."""
    return [
        LIGHTHOUSE,
        "--min_replicas",
        str(spec.ft_min_replicas),
        "--bind",
        f"[::]:{port}",
        "--join_timeout_ms",
        str(spec.ft_join_timeout_ms),
        "--heartbeat_timeout_ms",
        str(spec.ft_heartbeat_timeout_ms),
    ]


def with_lighthouse(spec: JobSpec, argv: Sequence[str], port: int) -> list[str]:
    """The first node's command: the Lighthouse in the background (its lines in the node's
    log), then the group's torchrun in the shell's place."""
    start = f'{shlex.join(lighthouse_argv(spec, port))} 2>&1 & exec "$@"'
    return ["sh", "-c", start, "sh", *argv]
