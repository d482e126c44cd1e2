"""The straggler scores: relative and individual, threshold, nodes, recovery, noise, min/max."""

from __future__ import annotations

import pytest

from ddptui.core.diagnose.collectives import CollectiveTimeline, StepTimes
from ddptui.core.diagnose.straggler import (
    Extreme,
    StragglerScorer,
    extremes,
    format_min_max,
    min_max_line,
)
from tests.unit.diagnose.jobs import nodes_of, simulate


def _steps(**job: object) -> list[StepTimes]:
    timeline = CollectiveTimeline(world_size=int(job.get("ranks", 4)))  # type: ignore[call-overload]
    for sample in simulate(**job):  # type: ignore[arg-type]
        timeline.add(sample)
    return timeline.steps(limit=1000)


def test_the_rank_the_others_wait_for_is_named_with_its_node_and_what_it_costs() -> None:
    steps = _steps(steps=40, extra=lambda r, s: 0.12 if r == 1 else 0.0, jitter_s=0.01)
    result = StragglerScorer().score(steps, nodes_of())
    assert result.ranks == (1,) and result.nodes == () and result.method == "arrival"
    score = result.score_of(1)
    assert score is not None and score.slow
    assert score.relative == pytest.approx(0.2 / 0.32, abs=0.04)
    assert score.late_s == pytest.approx(0.12, abs=0.01) and score.wait_s == 0.0
    assert result.evidence == (
        f"rank 1 (node0) at {score.relative:.2f}: its peers wait 0.12 s per step for it "
        f"({score.compute_s:.2f} s of compute a step)",
    )
    others = [s for s in result.scores if s.rank != 1]
    assert all(s.relative > 0.9 and not s.slow for s in others)
    assert result.to_dict()["ranks"] == [1] and result.to_dict()["scores"]["1"]["relative"] < 0.7


def test_a_30_percent_straggler_scores_0_77_so_a_threshold_of_0_8_names_it() -> None:
    """NVRx's arithmetic: 1/1.3 = 0.77 is above 0.75; the operator raises the threshold."""
    steps = _steps(steps=40, extra=lambda r, s: 0.06 if r == 3 else 0.0)
    scorer = StragglerScorer()
    assert scorer.score(steps, nodes_of()).ranks == ()
    scorer.threshold = 0.8
    result = scorer.score(steps, nodes_of())
    assert result.ranks == (3,) and result.threshold == 0.8


def test_a_node_whose_ranks_are_all_slow_is_named_as_a_node() -> None:
    steps = _steps(ranks=6, steps=40, extra=lambda r, s: 0.1 if r in (2, 3) else 0.0)
    result = StragglerScorer().score(steps, nodes_of(6))
    assert result.ranks in ((2, 3), (3, 2)) and result.nodes == ("node1",)
    assert result.evidence[0].startswith("node node1: all 2 ranks slow (0.6")
    assert result.evidence[0].endswith("its peers wait 0.10 s per step for it")


def test_one_slow_rank_does_not_make_its_node_slow() -> None:
    steps = _steps(steps=40, extra=lambda r, s: 0.1 if r == 2 else 0.0)
    assert StragglerScorer().score(steps, nodes_of()).nodes == ()


def test_a_rank_slow_for_a_while_is_cleared_when_it_recovers() -> None:
    steps = _steps(steps=120, extra=lambda r, s: 0.15 if r == 0 and 30 <= s < 60 else 0.0)
    scorer = StragglerScorer(window_steps=20)
    named = {end: scorer.score(steps[:end], nodes_of()).ranks for end in range(10, 120, 5)}
    assert all(named[end] == () for end in range(10, 30, 5))
    assert all(named[end] == (0,) for end in range(45, 65, 5))
    assert all(named[end] == () for end in range(75, 120, 5))
    late = scorer.score(steps[:55], nodes_of()).score_of(0)
    assert late is not None and late.individual < 0.75  # slower than its own best, too


def test_a_balanced_noisy_job_names_nobody() -> None:
    """Jitter of a third of the step, a rank at a time: the medians stay near 1."""
    for seed in range(5):
        steps = _steps(ranks=8, steps=200, step_s=0.1, jitter_s=0.03, seed=seed)
        scorer = StragglerScorer()
        rounds = [scorer.score(steps[:end], nodes_of(8)) for end in range(10, 200, 5)]
        assert all(r.ranks == () and r.evidence == () for r in rounds), seed
        assert min(s.relative for s in rounds[-1].scores) > 0.8


def test_tiny_steps_need_a_wait_worth_naming() -> None:
    """Steps of 3 ms: a rank 2 ms slower scores 0.6, but costs its peers too little."""
    steps = _steps(steps=40, step_s=0.001, extra=lambda r, s: 0.002 if r == 1 else 0.0)
    result = StragglerScorer().score(steps, nodes_of())
    assert result.ranks == () and result.score_of(1).relative < 0.75  # type: ignore[union-attr]
    assert StragglerScorer(min_late_s=0.001).score(steps, nodes_of()).ranks == (1,)


def test_too_few_steps_give_no_judgement() -> None:
    result = StragglerScorer().score(_steps(steps=5), nodes_of())
    assert result.method == "" and result.scores == () and result.steps == 4


def test_gpu_durations_score_the_same_straggler() -> None:
    steps = _steps(steps=40, extra=lambda r, s: 0.1 if r == 2 else 0.0, durations=True)
    result = StragglerScorer().score(steps, nodes_of())
    assert result.ranks == (2,) and result.method == "duration"


def test_min_max_line_names_the_rank_holding_each_extreme() -> None:
    steps = _steps(steps=40, extra=lambda r, s: 0.1 if r == 1 else 0.0)
    result = StragglerScorer().score(steps, nodes_of())
    gpu = {"util": {0: 100.0, 1: 35.0, 2: 99.0, 3: 100.0}, "power": {}, "sm_clock": {1: 1410.0}}
    line = min_max_line(result, gpu)
    fields = {e.field: e for e in line}
    assert list(fields) == ["step", "compute", "wait", "util", "sm_clock"]
    assert fields["compute"].high_rank == 1 and fields["wait"].low_rank == 1
    assert fields["wait"].high == pytest.approx(0.1, abs=0.005)
    assert fields["util"] == Extreme("util", 35.0, 1, 100.0, 0)  # the lower rank of equals
    text = format_min_max(line)
    assert "| wait 0.00s (r1)..0.10s (r" in text
    assert text.endswith("| util 35% (r1)..100% (r0) | sm_clock 1410MHz (r1)..1410MHz (r1)")


def test_extremes_of_nothing_is_nothing() -> None:
    assert extremes({"step": {}}) == ()
