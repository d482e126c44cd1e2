"""The straggler watch on captures from H200s (NCCL), recorded by bench/gpu/straggler.sh.

`gpu_h200x2`: rank 1 of 2 sleeps 0.6 s more a step than the others' 0.2 s;
`gpu_h200x2_live` and `gpu_h200x4_live`: rank 1 of 2 and of 4 computes 40% longer (0.28 s vs
0.2 s), the records of runs in which the console named it live. The job syncs its GPU only
every 20 steps, so the fast ranks' CPUs run ahead and their all-reduce kernels wait on the GPU
for the whole step: their compute is read from their own enqueue times, and the straggler's
relative score is the ratio of the work (0.2 / 0.28), not zero.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from ddptui.core.diagnose.clock import ZERO
from ddptui.core.diagnose.collectives import CollectiveTimeline, read_samples
from ddptui.core.diagnose.straggler import StragglerResult, StragglerScorer

DATA = Path(__file__).resolve().parents[2] / "data" / "straggler"
CAPTURES = {  # capture -> (ranks, the slow rank's work over the others')
    "gpu_h200x2": (2, 0.8 / 0.2),
    "gpu_h200x2_live": (2, 0.28 / 0.2),
    "gpu_h200x4_live": (4, 0.28 / 0.2),
}


def _result(capture: str, case: str, tmp_path: Path) -> StragglerResult:
    with tarfile.open(DATA / capture / f"straggler_{case}_records.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    lines: list[str] = []
    for path in sorted(tmp_path.glob("*/collectives/rank_*.jsonl")):
        lines += path.read_text().splitlines()
    ranks = CAPTURES[capture][0]
    timeline = CollectiveTimeline(ranks)
    for sample in sorted(read_samples(lines), key=lambda s: s.wall_ns):
        timeline.add(sample, ZERO)
    nodes = {rank: "local0" for rank in range(ranks)}
    return StragglerScorer(threshold=0.8).score(timeline.steps(30), nodes)


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_the_rank_the_others_wait_for_is_named_from_nccl_durations(
    capture: str, tmp_path: Path
) -> None:
    result = _result(capture, "slow", tmp_path)
    assert result.ranks == (1,), result
    assert result.method == "duration"
    scores = {s.rank: s for s in result.scores}
    assert scores[1].wait_s < 0.01 < scores[0].wait_s  # rank 0 waits for rank 1, not back
    expected = 1 / CAPTURES[capture][1]
    assert expected - 0.06 < scores[1].relative < expected + 0.06, scores[1]
    assert all(s.relative > 0.95 for s in result.scores if s.rank != 1), result.scores
    assert "its peers wait" in result.evidence[0]


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_a_balanced_gpu_job_names_nobody(capture: str, tmp_path: Path) -> None:
    result = _result(capture, "balanced", tmp_path)
    assert result.ranks == ()
    assert all(s.relative > 0.9 for s in result.scores), result.scores
