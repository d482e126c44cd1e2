"""MetricStore and the metrics file: series, spread, best, trend, throughput over ranks."""

from __future__ import annotations

import math
import os
import pickle
import stat
from pathlib import Path

from ddptui.core.metrics.metrics_file import (
    MetricsWriter,
    decode_sample,
    encode_sample,
    read_samples,
)
from ddptui.core.metrics.names import Goal
from ddptui.core.metrics.sample import MetricSample
from ddptui.core.metrics.store import MetricStore, StepRange, Trend, trend_of


def two_ranks(store: MetricStore, steps: int = 10) -> None:
    for step in range(steps):
        for rank in (0, 1):
            loss = 10.0 / (step + 1) + rank * 0.1
            values = {"loss": loss, "samples/s": 100.0 + rank * 10, "train_acc": step / 10}
            store.add(MetricSample(rank, step, values, ts=float(step)))


def test_series_per_rank_and_spread_across_ranks() -> None:
    store = MetricStore()
    two_ranks(store)
    assert store.names() == ["loss", "samples/s", "train_acc"]
    assert store.ranks("loss") == [0, 1]
    assert store.series("loss", 1)[:2] == [(0, 10.1), (1, 5.1)]
    assert store.spread("loss")[0] == StepRange(0, 10.0, 10.1, 2)
    assert store.series("nothing", 0) == [] and store.spread("nothing") == []


def test_best_follows_the_metrics_goal_and_latest_is_the_last_printed() -> None:
    store = MetricStore()
    two_ranks(store)
    assert store.best("loss") == 1.0  # lowest: rank 0 at step 9
    assert store.latest("loss") == 1.1  # rank 1 printed last
    assert store.best("train_acc") == 0.9
    view = store.view("loss")
    assert view.goal is Goal.LOWER and not view.throughput and view.ranks == (0, 1)
    assert view.trend is Trend.DOWN
    assert store.view("train_acc").trend is Trend.UP


def test_throughput_is_summed_over_ranks_each_at_its_latest() -> None:
    store = MetricStore()
    two_ranks(store, steps=3)
    assert store.total("samples/s") == [(0, 210.0), (1, 210.0), (2, 210.0)]
    assert store.latest("samples/s") == 210.0 and store.best("samples/s") == 210.0
    assert store.view("samples/s").trend is Trend.FLAT
    store.add(MetricSample(1, 3, {"samples/s": 50.0}))
    assert store.latest("samples/s") == 150.0  # rank 0's 100 and rank 1's new 50


def test_a_nan_is_kept_in_the_series_but_never_the_best_or_the_spread() -> None:
    store = MetricStore()
    store.add(MetricSample(0, 1, {"loss": 2.0}))
    store.add(MetricSample(0, 2, {"loss": math.nan}))
    assert math.isnan(store.series("loss", 0)[1][1]) and math.isnan(store.latest("loss") or 0)
    assert store.best("loss") == 2.0
    assert [r.step for r in store.spread("loss")] == [1]


def test_series_stay_bounded_and_keep_the_whole_run() -> None:
    store = MetricStore(max_points=64)
    for step in range(1000):
        store.add(MetricSample(0, step, {"loss": 1.0 / (step + 1), "tokens/s": 5.0}))
    series = store.series("loss", 0)
    assert len(series) <= 64 and series[0][0] < 100 and series[-1][0] == 999
    assert len(store.spread("loss")) <= 64 and len(store.total("tokens/s")) <= 64
    assert store.best("loss") == 1.0 / 1000  # best is over every value, not the kept ones


def test_trend_needs_a_few_points_and_a_real_change() -> None:
    assert trend_of([1.0, 2.0]) is Trend.UNKNOWN
    assert trend_of([1.0, 1.001, 0.999, 1.0]) is Trend.FLAT
    assert trend_of([4.0, 3.0, 2.0, 1.0]) is Trend.DOWN
    assert trend_of([1.0, math.nan, 2.0, 3.0, 4.0]) is Trend.UP


def test_summary_for_history() -> None:
    store = MetricStore()
    two_ranks(store, steps=3)
    summary = store.summary()
    assert summary["loss.last"] == store.latest("loss") and summary["loss.best"] == 10.0 / 3
    assert summary["samples/s.mean"] == 210.0 and summary["train_acc.best"] == 0.2
    assert "lr.best" not in summary


def test_the_metrics_file_is_private_and_reads_back_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    samples = [
        MetricSample(0, 1, {"loss": 2.5, "samples/s": 812.5}, 1700000000.1234),
        MetricSample(1, 2, {"loss": math.nan, "grad_norm": math.inf}, 1700000001.0),
    ]
    with MetricsWriter(path) as writer:
        writer.write(samples[0])
        writer.write_all(samples[1:])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    first_line = path.read_text().splitlines()[0]
    assert first_line == (
        '{"rank": 0, "step": 1, "ts": 1700000000.123, "values": {"loss": 2.5, "samples/s": 812.5}}'
    )
    with path.open("a") as file:
        file.write('{"rank": 2, "step": 3, "ts": 1.0, "val')  # a run cut off mid-line
    back = list(read_samples(path))
    assert len(back) == 2 and back[0].values == samples[0].values
    assert math.isnan(back[1].values["loss"]) and back[1].values["grad_norm"] == math.inf
    store = MetricStore()
    store.add_all(back)
    assert store.best("loss") == 2.5


def test_a_line_that_is_no_sample_is_none() -> None:
    assert decode_sample("not json") is None
    assert decode_sample('{"rank": 0, "step": 1, "ts": 0, "values": {"loss": "high"}}') is None
    assert decode_sample('{"rank": 0, "step": 1, "ts": 0, "values": [1]}') is None
    assert decode_sample("[]") is None
    sample = MetricSample(3, 4, {"x": -math.inf})
    assert decode_sample(encode_sample(sample)) == sample


def test_samples_and_stores_cross_a_process_pipe() -> None:
    sample = MetricSample(7, 3, {"loss": math.inf, "tokens/s": 5.0}, 2.5)
    assert pickle.loads(pickle.dumps(sample)) == sample
    store = MetricStore()
    store.add(sample)
    assert pickle.loads(pickle.dumps(store)).summary() == store.summary()
