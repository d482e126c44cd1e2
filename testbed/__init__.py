"""Real multi-host test harness: network namespaces, sshd per host, Slurm 22.05.

Why: the console drives torchrun on many nodes over SSH/Slurm; these give it real
hosts (isolated namespaces on one machine) to drive.  See fixtures.py for pytest use.
"""

from __future__ import annotations

from .commands import TestbedError, check_prerequisites
from .netns import Testbed
from .processes import pids_in_netns
from .slurm import SlurmCluster
from .sshd import SshServers
from .stale import cleanup_stale

__all__ = [
    "Testbed",
    "TestbedError",
    "SlurmCluster",
    "SshServers",
    "check_prerequisites",
    "cleanup_stale",
    "pids_in_netns",
]
