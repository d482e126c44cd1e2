"""Provides the stand-in nvidia-smi (it replays a capture of 2 x H100) and the check of what
the console made of it: every node's samples, both GPUs, and each rank on its own GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

FAKE_SMI = Path(__file__).parent / "fake_gpu"


def assert_ranks_mapped(gpu: list[dict[str, Any]], expected: dict[str, list[list[int]]]) -> None:
    """`gpu`: a run's gpu events; `expected`: per node, the ranks each of its GPUs holds."""
    assert {e["node"] for e in gpu} == set(expected)
    for node, ranks in expected.items():
        mine = [e for e in gpu if e["node"] == node]
        assert len(mine) >= 3, node
        assert [g["index"] for g in mine[0]["gpus"]] == [0, 1]
        assert mine[0]["gpus"][0]["mem_total_mib"] == 81559
        mapped = [e for e in mine if any(g["ranks"] for g in e["gpus"])]
        assert mapped, f"no sample of {node} mapped a rank to a GPU"
        assert [g["ranks"] for g in mapped[-1]["gpus"]] == ranks
