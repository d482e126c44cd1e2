"""WrongNumberCheck: NaN or Inf losses once each, spikes by orders of magnitude, per rank."""

from __future__ import annotations

import math

from ddptui.core.metrics.reader import MetricReader
from ddptui.core.metrics.sample import MetricSample
from ddptui.core.metrics.wrong_numbers import (
    WrongNumber,
    WrongNumberCheck,
    WrongNumberKind,
    ordinal,
)


def feed(check: WrongNumberCheck, rank: int, values: list[float], name: str = "loss") -> list:
    found = []
    for step, value in enumerate(values):
        found += check.check(MetricSample(rank, step, {name: value}))
    return found


def test_a_nan_loss_is_found_once_until_the_loss_is_a_number_again() -> None:
    check = WrongNumberCheck()
    found = feed(check, 3, [2.0, 1.9, math.nan, math.nan, 1.8, math.inf])
    assert [(f.rank, f.step, f.kind) for f in found] == [
        (3, 2, WrongNumberKind.NAN_OR_INF),
        (3, 5, WrongNumberKind.NAN_OR_INF),
    ]
    assert found[0].metric == "loss" and math.isnan(found[0].value)
    assert found[0].kind.value == "nan_or_inf"


def test_a_loss_jumping_a_hundredfold_is_a_spike_and_a_fall_is_not() -> None:
    check = WrongNumberCheck()
    values = [2.0, 2.1, 1.9, 2.0, 1.8, 1.9, 500.0, 1.9, 0.001]
    found = feed(check, 0, values)
    assert found == [WrongNumber(0, 6, "loss", 500.0, WrongNumberKind.LOSS_SPIKE, 1.95)]


def test_no_spike_is_called_on_too_few_points_or_below_the_factor() -> None:
    assert feed(WrongNumberCheck(), 0, [0.01, 50.0]) == []  # the start of training
    assert feed(WrongNumberCheck(), 0, [1.0] * 10 + [99.0]) == []
    assert feed(WrongNumberCheck(factor=10), 0, [1.0] * 10 + [11.0]) != []


def test_only_losses_are_checked_and_ranks_apart() -> None:
    check = WrongNumberCheck()
    assert feed(check, 0, [1.0, math.nan], name="grad_norm") == []  # fp16 overflow is routine
    assert feed(check, 0, [1.0, math.nan], name="loss_scale") == []
    assert feed(check, 0, [1.0] * 6) == []
    assert feed(check, 1, [300.0]) == []  # rank 1 has no history of its own yet
    eval_nan = check.check(MetricSample(2, 9, {"eval_loss": math.nan, "lr": 1e-4}))
    assert [(f.metric, f.kind) for f in eval_nan] == [("eval_loss", WrongNumberKind.NAN_OR_INF)]


def test_a_nan_on_a_line_with_a_step_is_said_at_its_step() -> None:
    reader, check = MetricReader(), WrongNumberCheck()
    for step in range(3):
        sample = reader.read(1, f"step {step} loss 2.{step} lr 1e-4")
        assert sample is not None and check.check(sample) == []
    sample = reader.read(1, "step 3 loss nan lr 1e-4")
    assert sample is not None
    (wrong,) = check.check(sample)
    assert wrong.said() == "loss is nan at step 3"


def test_a_nan_on_a_line_without_a_step_says_which_report_and_epoch_never_step_0() -> None:
    """A Trainer's dicts print no step: the finding names the rank's report and the epoch
    fraction the line printed, and the sample's step is that report (a point on the curve)."""
    reader, check = MetricReader(), WrongNumberCheck()
    lines = [f"{{'loss': 2.{i}, 'learning_rate': 5e-05, 'epoch': 0.{i:02d}}}" for i in range(34)]
    for line in lines:
        sample = reader.read(1, line)
        assert sample is not None and check.check(sample) == []
    sample = reader.read(1, "{'loss': nan, 'learning_rate': 5e-05, 'epoch': 0.52}")
    assert sample is not None and sample.step == 35 and sample.report == 35
    (wrong,) = check.check(sample)
    assert (wrong.step, wrong.report, wrong.epoch) == (35, 35, 0.52)
    assert wrong.said() == "loss is nan in rank 1's 35th report (epoch 0.52)"
    assert "step" not in wrong.said()


def test_a_report_without_an_epoch_and_a_spike_are_said_the_same_way() -> None:
    check = WrongNumberCheck()
    found = []
    for report, value in enumerate([2.0, 2.1, 1.9, 2.0, 1.8, 1.9, 500.0, math.inf], start=1):
        found += check.check(MetricSample(0, report, {"loss": value}, report=report))
    spike, broken = found
    assert spike.said() == "loss jumped to 500 in rank 0's 7th report (recent median 1.95)"
    assert broken.said() == "loss is inf in rank 0's 8th report"
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st",
        "111th",
    ]  # fmt: skip
