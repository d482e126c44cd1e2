"""Provides the real `ddptui` command line as run against the Slurm testbed: its argv in the
head namespace, its environment (the cluster's, without a job's), the headless run's flags.

Shared by the Slurm integration tests and the benchmarks that start ddptui on Slurm."""

from __future__ import annotations

import sys
from pathlib import Path

from .netns import ROOT, Testbed
from .slurm import SlurmCluster


def cluster_env(cluster: SlurmCluster, state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in cluster.env.items() if not k.startswith("SLURM_JOB")}
    return {**env, "DDPTUI_STATE_DIR": str(state), "PYTHONPATH": str(ROOT), **extra}


def ddptui_argv(tb: Testbed, *args: str) -> list[str]:
    return tb.ns_argv(tb.head, [sys.executable, "-m", "ddptui.cli", *args])


def headless_run_args(*args: str) -> list[str]:
    """`ddptui run --headless` on the Slurm testbed: 2 nodes x 2 processes, then `args`."""
    return [
        "run",
        "--headless",
        "--backend",
        "slurm",
        "--nodes",
        "2",
        "--nproc-per-node",
        "2",
        *args,
    ]
