"""MetricReader: steps from the line or the rank's last, the profile's patterns, the rate cap."""

from __future__ import annotations

import math

import pytest

from ddptui.core.metrics.reader import MetricReader, PatternError, compile_patterns
from ddptui.core.metrics.sample import MetricSample


def test_a_line_without_a_step_belongs_to_the_ranks_last_printed_step() -> None:
    reader = MetricReader()
    step = reader.read(1, "rank 1 step=7 loss=0.5", ts=1.0)
    assert step == MetricSample(1, 7, {"loss": 0.5}, 1.0)
    rate = reader.read(1, "rank 1 throughput: 99.5 samples/s (7 steps in 1.0 s)", ts=2.0)
    assert rate == MetricSample(1, 7, {"samples/s": 99.5}, 2.0, report=2)
    assert reader.step_of(1) == 7 and reader.step_of(0) == 0


def test_a_rank_that_never_prints_a_step_has_its_reports_counted() -> None:
    """A Trainer's dicts print no step: each is the rank's next report, its curve runs over
    them (not every point at step 0), and the first step printed takes over."""
    reader = MetricReader()
    first = reader.read(0, "{'loss': 2.3, 'epoch': 0.01}", ts=1.0)
    second = reader.read(0, "{'loss': 2.1, 'epoch': 0.02}", ts=2.0)
    assert first == MetricSample(0, 1, {"loss": 2.3, "epoch": 0.01}, 1.0, report=1)
    assert second is not None and (second.step, second.report) == (2, 2)
    assert reader.read(1, "throughput: 98.0 samples/s") == MetricSample(
        1, 1, {"samples/s": 98.0}, report=1
    )  # each rank counts its own
    stepped = reader.read(0, "step=40 loss=1.9")
    assert stepped is not None and (stepped.step, stepped.report) == (40, None)
    after = reader.read(0, "{'loss': 1.8, 'epoch': 0.4}")
    assert after is not None and (after.step, after.report) == (40, 4)


def test_a_column_table_is_read_under_its_header() -> None:
    """YOLO and fastai print a header once and rows of bare numbers under it."""
    reader = MetricReader()
    assert reader.read(0, "epoch     train_loss  valid_loss  accuracy  time") is None
    row = reader.read(0, "1         0.423412    0.312345    0.911234  00:12")
    assert row is not None and row.step == 1
    assert row.values == {"loss": 0.423412, "eval_loss": 0.312345, "accuracy": 0.911234}
    assert reader.read(1, "1         0.423412    0.312345    0.911234  00:12") is None
    assert reader.read(0, "1 2 3 4") is None  # not a row: a cell short


def test_the_callers_step_wins_over_the_remembered_one_but_not_over_the_line() -> None:
    reader = MetricReader()
    reader.read(0, "step=3 loss=1.0")
    trainer_dict = "{'loss': 0.9, 'epoch': 0.25}"
    found = reader.read(0, trainer_dict, last_step=40)
    assert found is not None and found.step == 40
    found = reader.read(0, "step=5 loss=0.8", last_step=40)
    assert found is not None and found.step == 5


def test_no_digit_no_metric_but_a_spelled_nan_gets_through() -> None:
    reader = MetricReader()
    assert reader.read(0, "Loading snapshot") is None
    assert reader.read(0, "loss: 0.5, lr: high") is not None
    nan = reader.read(0, "loss=nan")
    assert nan is not None and math.isnan(nan.values["loss"])
    inf = reader.read(0, "loss=Inf")
    assert inf is not None and inf.values["loss"] == math.inf


def test_a_progress_bar_redrawn_in_place_is_read_at_its_last_drawing() -> None:
    bar = (
        "Epoch 0:  10%|#  | 10/100 [00:01<00:09, 9.9it/s, train_loss=2.5]\r"
        "Epoch 0:  20%|## | 20/100 [00:02<00:08, 9.9it/s, train_loss=2.1]\r"
    )
    found = MetricReader().read(0, bar)
    assert found is not None and found.step == 20 and found.values["loss"] == 2.1


def test_the_profiles_own_patterns_add_to_the_formats_and_win_for_their_names() -> None:
    reader = MetricReader({"Loss": r"objective (\S+)", "tokens/s": r"speed (\S+) tok/s"})
    found = reader.read(2, "step=4 loss=1.5 objective 1.25 speed 12,000 tok/s")
    assert found is not None and found.step == 4
    assert found.values == {"loss": 1.25, "tokens/s": 12000.0}
    alone = reader.read(2, "objective 3e-2 (no format of ours)")
    assert alone is not None and alone.step == 4 and alone.values == {"loss": 0.03}
    assert reader.read(2, "objective high 7") is None  # the group holds no number


def test_a_bad_pattern_is_refused_with_its_name() -> None:
    with pytest.raises(PatternError, match="'acc'.*not a regular expression"):
        compile_patterns({"acc": "acc=(\\d"})
    with pytest.raises(PatternError, match="'acc'.*one group"):
        compile_patterns({"acc": r"acc=\d+"})
    with pytest.raises(PatternError, match="has 2"):
        compile_patterns({"acc": r"(acc)=(\d+)"})


def test_a_min_interval_reads_a_flooding_rank_once_per_interval() -> None:
    reader = MetricReader(min_interval=1.0)
    got = [reader.read(0, f"step={i} loss=0.{i}", ts=10.0 + i * 0.25) for i in range(9)]
    assert [s.step for s in got if s is not None] == [0, 4, 8]
    other = reader.read(1, "step=1 loss=0.1", ts=10.25)
    assert other is not None  # each rank has its own interval
    assert reader.read(0, "step=9 loss=0.1", ts=12.5) is None  # quiet until 13
    assert reader.read(0, "no metric 12", ts=13.0) is None
    assert reader.read(0, "step=9 loss=0.1", ts=13.1) is not None  # a line with none spent none


def test_a_block_of_lines_gives_its_samples_in_order() -> None:
    reader = MetricReader()
    block = [(0, "step=1 loss=2.0"), (1, "hello 1"), (1, "step=1 loss=2.2"), (0, "tps: 9")]
    found = reader.read_many(block, ts=5.0)
    assert [(s.rank, s.step, dict(s.values)) for s in found] == [
        (0, 1, {"loss": 2.0}),
        (1, 1, {"loss": 2.2}),
        (0, 1, {"tokens/s": 9.0}),
    ]
    assert all(s.ts == 5.0 for s in found)
