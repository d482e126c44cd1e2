"""WrongNumberCheck: NaN or Inf losses once each, spikes by orders of magnitude, per rank."""

from __future__ import annotations

import math

from ddptui.core.metrics.sample import MetricSample
from ddptui.core.metrics.wrong_numbers import WrongNumber, WrongNumberCheck, WrongNumberKind


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
