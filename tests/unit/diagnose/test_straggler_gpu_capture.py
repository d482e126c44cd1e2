"""The straggler watch on a capture from 2 H200s (NCCL): rank 1 sleeps 0.6 s more a step."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from ddptui.core.diagnose.clock import ZERO
from ddptui.core.diagnose.collectives import CollectiveTimeline, read_samples
from ddptui.core.diagnose.straggler import StragglerScorer

DATA = Path(__file__).resolve().parents[2] / "data" / "straggler" / "gpu_h200x2"


def _result(case: str, tmp_path: Path) -> object:
    with tarfile.open(DATA / f"straggler_{case}_records.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    lines: list[str] = []
    for path in sorted(tmp_path.glob("*/collectives/rank_*.jsonl")):
        lines += path.read_text().splitlines()
    timeline = CollectiveTimeline(2)
    for sample in sorted(read_samples(lines), key=lambda s: s.wall_ns):
        timeline.add(sample, ZERO)
    return StragglerScorer(threshold=0.8).score(timeline.steps(30), {0: "local0", 1: "local0"})


def test_the_rank_the_others_wait_for_is_named_from_nccl_durations(tmp_path: Path) -> None:
    result = _result("slow", tmp_path)
    assert result.ranks == (1,), result  # type: ignore[attr-defined]
    assert result.method == "duration"  # type: ignore[attr-defined]
    waits = {s.rank: s.wait_s for s in result.scores}  # type: ignore[attr-defined]
    assert waits[0] > 0.4 and waits[1] < 0.01  # rank 0 waits in the bucket rank 1 is late to


@pytest.mark.parametrize("case", ["balanced"])
def test_a_balanced_gpu_job_names_nobody(case: str, tmp_path: Path) -> None:
    assert _result(case, tmp_path).ranks == ()  # type: ignore[attr-defined]
