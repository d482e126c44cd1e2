"""The hook's records read back and lined up into steps: period, phase, waits, clocks."""

from __future__ import annotations

import json

import pytest

from ddptui.core.diagnose.collectives import CollectiveTimeline, parse_sample, read_samples
from ddptui.core.monitor.clock import ClockOffset
from tests.unit.diagnose.jobs import NS, simulate

LINE = {
    "v": 1,
    "rank": 3,
    "local_rank": 1,
    "host": "node1",
    "pid": 42,
    "wall_ns": 2 * NS,
    "mono_ns": 5,
    "period_s": 1.0,
    "cost_us": 410,
    "cpu_us": 380,
    "lost": 2,
    "rows": [
        [0, 7, "gloo:all_reduce", [[131584]], NS, None, None, None],
        [0, 8, "nccl:all_reduce", [[4]], NS + 5, NS + 9, NS + 20, 0.25],
        [0, 9, "gloo:broadcast", [[1]], 0, None, None, None],  # no time: left out
    ],
}


def test_a_line_of_the_hook_is_read_back() -> None:
    sample = parse_sample(json.dumps(LINE))
    assert sample is not None
    assert (sample.rank, sample.local_rank, sample.host, sample.lost) == (3, 1, "node1", 2)
    assert [c.seq for c in sample.collectives] == [7, 8]
    first, second = sample.collectives
    assert first.sizes == "[[131584]]" and first.duration_ns is None
    assert second.duration_ns == 250_000 and second.created_ns == NS + 5


def test_foreign_and_half_written_lines_are_skipped() -> None:
    text = json.dumps(LINE)
    assert read_samples([text, text[:40], "", "not json", json.dumps({"rank": 1})]) == [
        parse_sample(text)
    ]


def test_each_step_has_its_length_and_every_rank_s_wait() -> None:
    samples = simulate(steps=20, extra=lambda r, s: 0.1 if r == 1 else 0.0)
    timeline = CollectiveTimeline(world_size=4)
    for s in samples:
        timeline.add(s)
    steps = timeline.steps()
    assert len(steps) == 19  # the first step has no step before it
    step = steps[-1]
    assert step.method == "arrival" and step.period_s == pytest.approx(0.302)
    assert step.waits[1] == 0.0
    assert all(step.waits[r] == pytest.approx(0.1) for r in (0, 2, 3))


def test_the_step_is_found_among_several_buckets_and_ends_at_its_last() -> None:
    """3 all-reduces a step (DDP's buckets): the step ends at the third, where the widest
    gap to the next collective begins, and the waits are the ones there."""
    samples = simulate(steps=30, buckets=3, extra=lambda r, s: 0.05 if r == 2 else 0.0)
    timeline = CollectiveTimeline(world_size=4)
    for s in samples:
        timeline.add(s)
    steps = timeline.steps()
    assert all(s.seq % 3 == 0 for s in steps) and len(steps) == 29
    assert steps[-1].period_s == pytest.approx(0.2 + 0.05 + 0.010 + 0.002)
    assert steps[-1].waits[2] == 0.0 and steps[-1].waits[0] == pytest.approx(0.05)


def test_buckets_of_one_size_are_told_apart_by_the_pause_after_the_step() -> None:
    """Two all-reduces of the same size a step: their (op, sizes) repeat every collective,
    but the wide gap comes every second one, so the step is two."""
    samples = simulate(
        steps=30, buckets=2, same_sizes=True, jitter_s=0.01, extra=lambda r, s: 0.05 * (r == 3)
    )
    timeline = CollectiveTimeline(world_size=4)
    for s in samples:
        timeline.add(s)
    steps = timeline.steps()
    assert all(s.seq % 2 == 0 for s in steps) and len(steps) == 29
    assert min(steps[-1].waits, key=steps[-1].waits.__getitem__) == 3


def test_a_node_clock_ahead_is_taken_off_with_its_offset() -> None:
    """Node 1's clock is 2 s ahead: uncorrected, its ranks look 2 s late; corrected, the
    true straggler (rank 0, on node 0) is the one the others wait for."""
    samples = simulate(steps=12, extra=lambda r, s: 0.1 if r == 0 else 0.0, skew_s={1: 2.0})
    raw, fixed = CollectiveTimeline(world_size=4), CollectiveTimeline(world_size=4)
    offsets = {"node0": ClockOffset(0, 0, 1), "node1": ClockOffset(2 * NS, 100, 1)}
    for s in samples:
        raw.add(s)
        fixed.add(s, offsets[s.host])
    fooled = raw.steps()[-1].waits
    assert fooled[2] == fooled[3] == 0.0 and fooled[0] > 1.5  # node 1 looks 2 s late
    waits = fixed.steps()[-1].waits
    assert waits[0] == 0.0 and min(waits[r] for r in (1, 2, 3)) == pytest.approx(0.1)


def test_gpu_durations_need_no_clock_at_all() -> None:
    samples = simulate(
        steps=12, extra=lambda r, s: 0.1 if r == 0 else 0.0, skew_s={1: 2.0}, durations=True
    )
    timeline = CollectiveTimeline(world_size=4)
    for s in samples:
        timeline.add(s)  # no offsets given
    step = timeline.steps()[-1]
    assert step.method == "duration" and step.waits[0] == 0.0
    assert all(step.waits[r] == pytest.approx(0.1) for r in (1, 2, 3))
    assert step.period_s == pytest.approx(0.302)


def test_a_collective_some_rank_never_reported_is_left_out_once_all_went_past() -> None:
    samples = simulate(steps=10)
    dropped = [
        s
        if s.rank != 2
        else s.__class__(
            **{**s.__dict__, "collectives": tuple(c for c in s.collectives if c.seq != 4)}
        )
        for s in samples
    ]
    timeline = CollectiveTimeline(world_size=4)
    for s in dropped:
        timeline.add(s)
    seqs = [s.seq for s in timeline.steps()]
    assert 4 not in seqs and 5 not in seqs  # step 5 has no step 4 before it
    assert seqs[-1] == 10


def test_no_step_is_made_before_every_rank_was_heard() -> None:
    timeline = CollectiveTimeline(world_size=4)
    for s in simulate(steps=10):
        if s.rank != 3:
            timeline.add(s)
    assert timeline.steps() == []
