"""The live straggler watch: rounds, confirmation, recovery, pause, threshold, GPU evidence,
and the sampler rows made into the audit's records."""

from __future__ import annotations

import json
from typing import Any

from ddptui.core.diagnose.collectives import CollectiveSample
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.speed import SpeedRound, SpeedWatch, StragglerReport, gpu_evidence
from ddptui.core.events import GpuStat
from ddptui.core.monitor.collective_record import records_from_rows
from tests.unit.diagnose.jobs import nodes_of, simulate


def _line(sample: CollectiveSample) -> dict[str, Any]:
    """A sample as the rank's file line the node's stream carries (already decoded)."""
    rows = [
        [c.pg, c.seq, c.op, json.loads(c.sizes), c.created_ns, None, None, None, ["Float"], []]
        for c in sample.collectives
    ]
    return {
        "v": 1,
        "rank": sample.rank,
        "local_rank": sample.local_rank,
        "host": sample.host,
        "pid": sample.pid,
        "wall_ns": sample.wall_ns,
        "mono_ns": 0,
        "period_s": 1.0,
        "cost_us": 0,
        "cpu_us": 0,
        "lost": 0,
        "rows": rows,
    }


def _rounds(watch: SpeedWatch, samples: list[CollectiveSample], per_round: int = 8) -> list:
    """Feed the samples in the order they were made, a round after every `per_round`."""
    nodes = nodes_of()
    events: list = []
    ordered = sorted(samples, key=lambda s: s.wall_ns)
    for at, sample in enumerate(ordered, 1):
        watch.sample(nodes[sample.rank], _line(sample))
        if at % per_round == 0:
            events += watch.check(float(at))
    return events


def test_a_slow_rank_is_named_after_two_rounds_and_the_report_is_the_headless_contract() -> None:
    watch = SpeedWatch(4, every_s=0.0)
    events = _rounds(watch, simulate(steps=80, extra=lambda r, s: 0.08 if r == 1 else 0.0))
    reports = [e for e in events if isinstance(e, StragglerReport)]
    assert len(reports) == 1, [r.ranks for r in reports]  # named once, never flapping
    report = reports[0]
    assert report.ranks == (1,) and report.nodes == () and report.method == "arrival"
    data = report.to_dict()
    assert data["event"] == "straggler" and data["ranks"] == [1] and data["nodes"] == []
    assert set(data["scores"]) == {"0", "1", "2", "3"} and data["scores"]["1"]["relative"] < 0.8
    assert data["evidence"][0].startswith("rank 1 (node0) at 0.")
    rounds = [e for e in events if isinstance(e, SpeedRound)]
    first_slow = next(i for i, r in enumerate(rounds) if 1 in r.slow)
    assert first_slow >= 1  # the round that first scored it slow did not name it yet
    assert rounds[-1].line.startswith("step ") and "compute" in rounds[-1].line
    assert watch.last is report


def test_a_rank_that_recovers_is_cleared_with_an_empty_report() -> None:
    watch = SpeedWatch(4, every_s=0.0)
    slow_for_a_while = simulate(steps=160, extra=lambda r, s: 0.1 if r == 2 and s < 60 else 0.0)
    reports = [e for e in _rounds(watch, slow_for_a_while) if isinstance(e, StragglerReport)]
    assert [r.ranks for r in reports] == [(2,), ()]
    assert reports[-1].evidence == () and watch.last is reports[-1]


def test_a_balanced_job_sends_no_report() -> None:
    watch = SpeedWatch(4, every_s=0.0)
    events = _rounds(watch, simulate(steps=120, jitter_s=0.01))
    assert not [e for e in events if isinstance(e, StragglerReport)] and watch.last is None
    assert any(isinstance(e, SpeedRound) and e.scores for e in events)


def test_paused_the_watch_scores_nothing_and_the_threshold_stays_in_range() -> None:
    watch = SpeedWatch(4, every_s=0.0)
    watch.set_paused(True)
    events = _rounds(watch, simulate(steps=60, extra=lambda r, s: 0.2 if r == 1 else 0.0))
    assert all(isinstance(e, SpeedRound) and e.paused and not e.scores for e in events)
    assert watch.set_threshold(0.2) == 0.5 and watch.set_threshold(0.99) == 0.95
    assert watch.set_threshold(0.85) == 0.85 and watch.scorer.threshold == 0.85


def test_the_rounds_come_no_more_often_than_every_s() -> None:
    watch = SpeedWatch(4, every_s=2.0)
    for sample in simulate(steps=40):
        watch.sample(nodes_of()[sample.rank], _line(sample))
    assert watch.check(100.0) and not watch.check(101.0) and watch.check(102.0)


def test_the_slow_ranks_gpu_says_why_against_its_peers() -> None:
    slow = GpuStat(5, 97, 1, 2, 300.0, 71, (5,), sm_mhz=1410, throttle=("power cap",))
    peers = [GpuStat(i, 98, 1, 2, 305.0, 70, (i,), sm_mhz=1980) for i in range(4)]
    said = gpu_evidence(slow, peers)
    assert said == (
        "GPU 5 power cap, SM clock 1,410 MHz vs 1,980 on the others: its kernels run slower"
    )
    idle = GpuStat(5, 40, 1, 2, 150.0, 50, (5,), sm_mhz=1980)
    assert gpu_evidence(idle, peers).endswith(
        "utilisation 40% vs 98 on the others, power 150 W vs 305 on the others, temperature "
        "50 C vs 70 on the others: its time goes off the GPU (data loading or CPU work)"
    )
    assert gpu_evidence(peers[0], peers[1:]) == "GPU 0 as its peers"


def test_the_evidence_of_a_named_rank_carries_its_gpu() -> None:
    watch = SpeedWatch(2, every_s=0.0)
    gpus = {
        "node0": (GpuStat(0, 99, 1, 2, 300.0, 60, (0,), sm_mhz=1980),),
        "node1": (GpuStat(1, 40, 1, 2, 150.0, 88, (1,), sm_mhz=1100, throttle=("thermal",)),),
    }
    nodes = nodes_of(2, 1)
    for sample in sorted(
        simulate(ranks=2, per_node=1, steps=80, extra=lambda r, s: 0.1 if r == 1 else 0.0),
        key=lambda s: s.wall_ns,
    ):
        watch.sample(nodes[sample.rank], _line(sample))
    watch.check(1.0, gpus)
    events = watch.check(2.0, gpus)
    report = next(e for e in events if isinstance(e, StragglerReport))
    assert report.nodes == ("node1",)  # its only rank: the node is slow
    assert report.evidence[0].startswith("node node1: all 1 ranks slow")
    assert report.evidence[-1].endswith(
        "; GPU 1 thermal, SM clock 1,100 MHz vs 1,980 on the others, utilisation 40% vs 99 on "
        "the others, power 150 W vs 300 on the others, temperature 88 C vs 60 on the others: "
        "its time goes off the GPU (data loading or CPU work)"
    )
    line = next(e for e in events if isinstance(e, SpeedRound)).line
    assert "sm_clock 1100MHz (r1)..1980MHz (r0)" in line and "power 150W (r1)..300W (r0)" in line


def test_the_sampler_rows_become_the_audits_records() -> None:
    rows = [
        [0, 7, "gloo:all_reduce", [[8, 4]], 1, None, None, None, ["Float"], [[8, 4]]],
        [0, 8, "nccl:broadcast", [[2]], 2, 3, 4, 0.5, ["Half"], [[2]]],
        ["x", 9, "bad", [], 0],
        [1, 2],
    ]
    records = records_from_rows(3, rows)
    assert [(r.rank, r.pg, r.seq, r.collective) for r in records] == [
        (3, "0", 7, "all_reduce"),
        (3, "0", 8, "broadcast"),
    ]
    assert records[0].input_sizes == ((8, 4),) and records[0].input_dtypes == ("Float",)
    assert records[0].describe() == "all_reduce [8x4] Float"


def test_the_monitor_scores_the_lines_in_its_tick_and_feeds_the_audit() -> None:
    monitor = JobWatch(["node0", "node1"], 2)
    nodes = nodes_of()
    for sample in simulate(steps=60, extra=lambda r, s: 0.1 if r == 3 else 0.0):
        assert monitor.collectives(nodes[sample.rank], _line(sample), now=1.0) == []
    assert monitor.audit.mismatches == []
    monitor.tick(10.0, 0)
    events = monitor.tick(12.0, 0)
    reports = [e for e in events if isinstance(e, StragglerReport)]
    assert reports and reports[0].ranks == (3,)
    assert monitor.summary().straggler is reports[0]


def test_a_rank_with_another_size_is_a_mismatch_event() -> None:
    monitor = JobWatch(["node0"], 2)
    base = {"v": 1, "local_rank": 0, "host": "h", "pid": 1, "wall_ns": 1, "mono_ns": 1}
    base |= {"period_s": 1.0, "cost_us": 0, "cpu_us": 0, "lost": 0}
    row = [0, 1, "gloo:all_reduce", [[4]], 5, None, None, None, ["Float"], [[4]]]
    odd = [0, 1, "gloo:all_reduce", [[5]], 5, None, None, None, ["Float"], [[5]]]
    assert monitor.collectives("node0", {**base, "rank": 0, "rows": [row]}) == []
    events = monitor.collectives("node0", {**base, "rank": 1, "rows": [odd]})
    assert [e.to_dict()["event"] for e in events] == ["mismatch"]
    assert events[0].to_dict()["kind"] == "size"


def test_1024_ranks_fold_into_a_few_lines_of_the_speed_view() -> None:
    from ddptui.core.diagnose.speed import rank_ranges, speed_rows
    from ddptui.core.diagnose.straggler import RankScore

    def score(rank: int) -> RankScore:
        slow = rank in (5, 700)
        compute = 0.5 if slow else 0.3 + (rank % 3) * 0.001
        return RankScore(
            rank, f"n{rank // 8}", 0.3 / compute, 1.0, compute, 0.0 if slow else 0.2, 0.2, slow
        )

    round_ = SpeedRound(tuple(score(r) for r in range(1024)), (5, 700), (), (), 0.8)
    rows = speed_rows(round_)
    assert [r.label for r in rows] == ["r5,700", "r0-4,6-699,701-1023"]
    assert rows[0].slow and rows[0].compute_s == 0.5 and not rows[1].slow
    assert rank_ranges([3, 1, 2, 9]) == "r1-3,9"


def test_an_offset_within_its_error_bound_is_not_told_from_zero() -> None:
    from ddptui.core.monitor.clock import ClockExchange, estimate_offset

    # the node read its clock 40 ms into an 50 ms round trip (an SSH command's start): the
    # midpoint says +15 ms, within the 25 ms bound: not told apart from the same clock
    same = estimate_offset([ClockExchange(0, 40_000_000, 50_000_000)])
    assert same is not None and same.offset_ns == 15_000_000 and not same.told
    skewed = estimate_offset([ClockExchange(0, 2_040_000_000, 50_000_000)])
    assert skewed is not None and skewed.told and skewed.offset_ns == 2_015_000_000
