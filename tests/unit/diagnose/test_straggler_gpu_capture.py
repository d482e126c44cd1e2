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

from ddptui.core.diagnose.collectives import CollectiveTimeline, read_samples
from ddptui.core.diagnose.straggler import StragglerResult, StragglerScorer
from ddptui.core.monitor.clock import ZERO

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


def test_the_named_straggler_is_what_its_rank_events_and_the_story_say(tmp_path: Path) -> None:
    """The capture replayed through the Monitor, as the nodes' streams carried it: the speed
    watch names rank 1, and rank 1's own rank events say straggler (one judge, no other)."""
    import json

    from ddptui.core.diagnose.job_watch import JobWatch
    from ddptui.core.diagnose.speed import StragglerReport
    from ddptui.core.events import RankChanged
    from ddptui.core.story.story import Story

    with tarfile.open(DATA / "gpu_h200x2_live" / "straggler_slow_records.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    lines = [
        json.loads(line)
        for path in sorted(tmp_path.glob("*/collectives/rank_*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    monitor = JobWatch(["local0"], 2)
    events = monitor.feed("local0", b"[ddptui:0:0]:step 0\n[ddptui:1:1]:step 0\n", now=1.0)
    for i, line in enumerate(sorted(lines, key=lambda d: d["wall_ns"])):
        events += monitor.collectives("local0", line, now=2.0 + i * 0.1)
        if i % 10 == 0:
            events += monitor.tick(2.0 + i * 0.1, hang_timeout=0)
    named = [e for e in events if isinstance(e, StragglerReport) and e.ranks]
    assert named and named[0].ranks == (1,)
    flags = {(e.rank, e.straggler) for e in events if isinstance(e, RankChanged)}
    assert (1, True) in flags and (0, True) not in flags
    story = Story()
    story.retell(events)
    assert story.headline().startswith("straggler: rank 1 on local0 — ")
