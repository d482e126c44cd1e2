"""Stragglers named live over SSH and on Slurm, with real torchrun (gloo) on the testbed.

The same plain DDP loop as the local tests (tests/data/straggler/slow_rank_ddp.py): the
node helper's tail forwards each rank's collectives over the SSH channel it already holds,
the session measures each host's clock offset over the same connection and names the rank
the others wait for, with its host, in its headless `straggler` events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed import SlurmCluster
from testbed.netns import Testbed
from tests.integration.slurmrun import run
from tests.integration.sshrun import run_headless

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "straggler" / "slow_rank_ddp.py"
WITHIN_S = 60.0
# Rank 3 sleeps 1.4x the others a step; 400 steps is about 70 s: longer than the 60 s it must
# be named within.
JOB = (str(SCRIPT), "--steps", "400", "--slow-rank", "3", "--slow", "1.4")


def _named_with_its_node(result: Any) -> str:
    """Rank 3 named within the minute with its node, and still in the summary; the node."""
    summary = result.summary
    assert summary["ok"], (summary["detail"], result.stderr[-2000:])
    said = result.of("straggler")
    assert said, "no straggler named"
    running = min(e["ts"] for e in result.of("rank") if e["state"] == "running")
    assert said[0]["ranks"] == [3] and said[0]["ts"] - running < WITHIN_S
    node: str = next(e["node"] for e in result.of("rank") if e["rank"] == 3)
    assert said[0]["evidence"][0].startswith(f"rank 3 ({node}) at 0.")
    assert summary["straggler"]["ranks"] == [3]
    return node


@pytest.mark.timeout(600)
def test_ssh_a_rank_30_percent_slower_is_named_with_its_host(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    result = run_headless(
        clean_testbed, tmp_path / "state", "--hosts", "node[1-2]", *JOB, timeout=420
    )
    assert _named_with_its_node(result) in ("node1", "node2")


@pytest.mark.timeout(600)
def test_slurm_a_rank_30_percent_slower_is_named_with_its_node(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """On Slurm the node logs are on the shared filesystem: the console reads each node's
    collectives files beside its log."""
    _named_with_its_node(run(slurm_cluster, tmp_path, *JOB, timeout=480))
