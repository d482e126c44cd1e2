"""The line formats' readers against captured lines of each format (tests/data/metrics)."""

from __future__ import annotations

import math

import pytest

from ddptui.core.metrics.formats import (
    LineMetrics,
    parse_dict,
    parse_key_values,
    parse_line,
    parse_megatron,
    parse_torchtitan,
)
from ddptui.core.metrics.names import Goal, canonical_name, goal, is_throughput
from ddptui.core.metrics.numbers import read_number
from tests.cases import DATA

CAPTURES = DATA / "metrics"


def lines(name: str) -> list[str]:
    return (CAPTURES / name).read_text(encoding="utf-8").splitlines()


def read(name: str) -> list[LineMetrics | None]:
    return [parse_line(line) for line in lines(name)]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12,345", 12345.0),
        ("1,234,567.5", 1234567.5),
        ("30.12GiB", 30.12),
        ("512MiB", 0.5),
        ("34.95%", 34.95),
        ("1.000000E-04", 1e-4),
        ("2e-05", 2e-5),
        ("1.5k", 1500.0),
        ("3M", 3e6),
        ("12ms", 12.0),
        ("-0.5", -0.5),
    ],
)
def test_numbers_with_separators_units_and_scales(text: str, value: float) -> None:
    assert read_number(text) == pytest.approx(value)


def test_a_spelled_infinity_is_read_and_an_overflow_is_not() -> None:
    assert read_number("inf") == math.inf and read_number("-Infinity") == -math.inf
    assert math.isnan(read_number("NaN") or 0.0)
    assert read_number("1e999") is None
    assert read_number("1,2") is None and read_number("1.2.3") is None and read_number("x") is None


def test_names_one_idea_one_name() -> None:
    assert canonical_name("lm loss") == "loss"
    assert canonical_name("Train Loss") == "loss"
    assert canonical_name("tps") == canonical_name("tok/s") == "tokens/s"
    assert canonical_name("train_samples_per_second") == "samples/s"
    assert canonical_name("learning rate") == "lr"
    assert canonical_name("my-odd metric") == "my_odd_metric"  # unknown names are kept
    assert goal("loss") is Goal.LOWER and goal("eval_ppl") is Goal.LOWER
    assert goal("test_acc") is Goal.HIGHER and goal("samples/s") is Goal.HIGHER
    assert goal("lr") is Goal.NONE and goal("loss_scale") is Goal.NONE
    assert is_throughput("tokens/s") and is_throughput("samples/s") and not is_throughput("mfu")


def test_torchtitan() -> None:
    first, _, third, older = read("torchtitan.log")
    assert third == LineMetrics(
        20,
        {
            "loss": 7.2345, "grad_norm": 1.2345, "tokens/s": 12345.0, "tflops": 345.67,
            "mfu": 34.95, "memory_gib": 56.82, "memory_pct": 59.81,
        },
    )  # fmt: skip
    assert first is not None and first.step == 1 and first.values["tokens/s"] == 1203.0
    assert older is not None and older.values["tokens/s"] == 12401.0  # `wps`, before `tps`
    assert "grad_norm" not in older.values and older.values["memory_gib"] == 30.12


def test_megatron() -> None:
    first, second, broken, validation = read("megatron.log")
    assert first is not None and first.step == 10
    assert first.values["loss"] == pytest.approx(10.12345)
    assert first.values["lr"] == pytest.approx(1e-4)
    assert first.values["step_time_ms"] == 1234.5
    assert first.values["tflops"] == 123.4
    assert first.values["grad_norm"] == 12.345
    assert first.values["consumed_samples"] == 1280.0
    assert second is not None and second.step == 20 and "tflops" not in second.values
    assert broken is not None and broken.step == 100 and math.isnan(broken.values["loss"])
    assert broken.values["nan_iterations"] == 1.0
    assert validation == LineMetrics(100, {"eval_loss": 6.54321, "eval_ppl": 695.1234})
    timing_only = " iteration        5/      10 | elapsed time per iteration (ms): 12.5 |"
    assert parse_line(timing_only) == LineMetrics(5, {"step_time_ms": 12.5})


def test_hugging_face_trainer_dicts_take_the_step_from_the_caller() -> None:
    first, second, nan_norm, evaluation, end = read("hf_trainer.log")
    assert second == LineMetrics(None, {"loss": 1.23, "grad_norm": 4.5, "lr": 2e-05, "epoch": 0.5})
    assert first is not None and first.step is None and first.values["epoch"] == 0.1
    assert nan_norm is not None and math.isnan(nan_norm.values["grad_norm"])
    assert nan_norm.step is None  # a whole epoch (1.0) is still the Trainer's fraction
    assert evaluation is not None and evaluation.values["eval_loss"] == 1.0234
    assert evaluation.values["eval_acc"] == 0.6543
    assert end is not None and "loss" not in end.values
    assert end.values["run_mean_loss"] == 1.4321 and end.values["samples/s"] == 48.6


def test_json_lines() -> None:
    first, nan_loss, nested, event = read("json_lines.log")
    assert first == LineMetrics(10, {"loss": 2.5, "lr": 0.001, "tokens/s": 12345.6})
    assert nan_loss is not None and nan_loss.step == 20 and math.isnan(nan_loss.values["loss"])
    assert nested == LineMetrics(30, {"loss": 1.75, "accuracy": 0.61})  # `time` is not a metric
    assert event is None


def test_lightning_progress_bar_counts_steps_over_epochs() -> None:
    first, second, slow, plain = read("lightning.log")
    assert first == LineMetrics(100, {"loss": 2.31, "steps/s": 19.8})
    assert second is not None and second.step == 1 * 1000 + 450
    assert second.values == {"loss": 0.231, "eval_loss": 0.287, "val_acc": 0.912, "steps/s": 20.11}
    assert slow is not None and slow.step == 3000 and slow.values["steps/s"] == pytest.approx(0.8)
    assert plain is not None and plain.step == 4000  # step wins over epoch
    assert plain.values == {"loss": 0.0987, "val_acc": 0.935, "lr": 0.001, "epoch": 3.0}


def test_cifar10_vgg_as_printed_on_two_gpus() -> None:
    found = [f for f in read("cifar10_vgg.log") if f is not None]
    assert len(found) == 6  # the start and finished lines are no metrics
    assert found[0] == LineMetrics(
        1, {"loss": 0.0991, "train_acc": 0.976, "test_acc": 1.0, "samples/s": 12916.8}
    )
    assert [f.step for f in found] == [1, 1, 2, 2, 3, 3]


def test_bundled_trainers() -> None:
    step0, step19, throughput, epoch, cpu_rate, window, steady = read("bundled.log")
    assert step0 == LineMetrics(0, {"loss": 1.234567})
    assert step19 == LineMetrics(19, {"loss": 0.012345})
    assert throughput == LineMetrics(None, {"samples/s": 1234.5})
    assert epoch is None  # cpu_ddp's epoch line: its numbers are sizes, not measurements
    assert cpu_rate == LineMetrics(None, {"samples/s": 812.3})
    assert window is not None and window.values["samples/s"] == 123456.7
    assert steady == LineMetrics(None, {"samples/s": 120001.5})


def test_lines_that_hold_numbers_but_no_metric() -> None:
    assert read("not_metrics.log") == [None] * len(lines("not_metrics.log"))


def test_each_reader_declines_the_others_lines() -> None:
    titan = lines("torchtitan.log")[2]
    megatron = lines("megatron.log")[0]
    trainer = lines("hf_trainer.log")[0]
    assert parse_megatron(titan) is None and parse_dict(titan) is None
    assert parse_torchtitan(megatron) is None and parse_dict(megatron) is None
    assert parse_torchtitan(trainer) is None and parse_megatron(trainer) is None
    assert parse_key_values("port=29500 pid=4242 size=1024") is None  # no training word


def test_a_rate_in_words_is_not_the_key_of_the_next_pair() -> None:
    found = parse_line("test_acc=0.4987 samples/s=812.5 loss=1.0")
    assert found is not None and found.values["samples/s"] == 812.5
