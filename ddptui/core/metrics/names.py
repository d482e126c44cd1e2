"""Provides the metric names a line's keys are read as, and what each name means for its best."""

from __future__ import annotations

import re
from enum import Enum

# How a key becomes a name: lower case, runs of spaces and dashes one underscore. Then the
# aliases below, so that one idea has one name whichever trainer printed it. Names a trainer
# uses that are not listed stay as they are (lower-cased): nothing a user prints is dropped.
ALIASES: dict[str, str] = {
    # loss: what the step optimises, whatever the framework calls it
    "lm_loss": "loss",
    "train_loss": "loss",
    "train/loss": "loss",
    "training_loss": "loss",
    "loss_step": "loss",
    "train_loss_step": "loss",
    "loss_train": "loss",  # litgpt's `loss train:`
    "total_loss": "loss",  # detectron2, DINOv2: the sum the step optimises
    "reduced_train_loss": "loss",  # NeMo
    "loss/train/total": "loss",  # composer
    "val": "eval_loss",  # litgpt's `loss train: 2.3, val: 2.5`
    "val_loss": "eval_loss",
    "valid_loss": "eval_loss",
    "validation_loss": "eval_loss",
    "val/loss": "eval_loss",
    "eval/loss": "eval_loss",
    "test_loss": "eval_loss",
    "lm_loss_value": "eval_loss",  # Megatron's validation line
    "lm_loss_ppl": "eval_ppl",
    "valid_ppl": "eval_ppl",
    "val_ppl": "eval_ppl",
    # the optimiser
    "grad_norm": "grad_norm",
    "gradient_norm": "grad_norm",
    "grad_norm_total": "grad_norm",
    "norm": "grad_norm",  # llm.c
    "gnorm": "grad_norm",  # fairseq
    "learning_rate": "lr",
    "train/learning_rate": "lr",
    "train_learning_rate": "lr",
    "train/grad_norm": "grad_norm",
    "loss_scale": "loss_scale",
    "params_norm": "params_norm",
    # accuracy
    "acc": "accuracy",
    "train/accuracy": "train_acc",
    "train_accuracy": "train_acc",
    "val_accuracy": "val_acc",
    "test_accuracy": "test_acc",
    "eval_accuracy": "eval_acc",
    # throughput: kept recognisable, each rank's own (summed over ranks)
    "tps": "tokens/s",
    "wps": "tokens/s",
    "tok/s": "tokens/s",
    "tokens_per_second": "tokens/s",
    "tokens_per_sec": "tokens/s",
    "tokens/sec": "tokens/s",
    "tokens_per_second_per_gpu": "tokens/s",  # torchtune: each rank's own, as the others
    "throughput/tokens_per_sec": "tokens/s",  # composer
    "samples_per_second": "samples/s",
    "samples_per_sec": "samples/s",
    "samples/sec": "samples/s",
    "train_samples_per_second": "samples/s",
    "throughput/samples_per_sec": "samples/s",  # composer
    "currsamplespersec": "samples/s",  # DeepSpeed's ThroughputTimer
    "images/s": "samples/s",
    "img/s": "samples/s",
    "throughput_per_gpu_(tflop/s/gpu)": "tflops",
    "tflops/s": "tflops",
    "tflops_per_gpu": "tflops",
    "approx_flops_per_gpu": "tflops",  # GPT-NeoX, printed `123.4TFLOPS`
    "it/s": "steps/s",
    "steps_per_second": "steps/s",
    "train_steps_per_second": "steps/s",
    # Megatron's other columns
    "elapsed_time_per_iteration_(ms)": "step_time_ms",
    "consumed_samples": "consumed_samples",
    "consumed_tokens": "consumed_tokens",
    "global_batch_size": "global_batch_size",
    "number_of_skipped_iterations": "skipped_iterations",
    "number_of_nan_iterations": "nan_iterations",
    "num_zeros": "num_zeros",
}

# Keys that say where the step is, not what it measured: the sample's step, never a value.
STEP_KEYS: dict[str, int] = {  # key -> preference (lower wins)
    "step": 0,
    "global_step": 0,
    "train/global_step": 0,
    "_step": 1,
    "iteration": 1,
    "num_updates": 0,  # fairseq
    "iter": 2,
    "it": 3,
    "epoch": 4,  # the step only where nothing finer is printed, and only when whole
}

# Keys that are not measurements of the training: who printed it, and when.
IGNORED_KEYS = frozenset(
    {
        "rank", "local_rank", "group_rank", "node_rank", "world_size", "world",
        "local_world_size", "pid", "port", "seed", "v_num", "t", "ts", "time", "timestamp",
        "seq", "gpu", "device", "ranks", "epochs", "iters", "warmup", "total_flos",
        "local_ranks", "global_ranks", "cuda", "micro_step",
        # the clock and the parts of a step's time: the step's own pace is read from its rate
        "eta", "data", "data_time", "batch_time", "iter_time", "last_time", "last_data_time",
        "remaining_time", "wall", "train_wall", "train_time",
        # memory in units a trainer does not say (MiB, M for MiB): torchtitan's is its own
        "memory", "mem", "max_mem",
        # the phase a line is in, printed where a key would be (timm's `Train: 0 [..]`)
        "train", "training", "test", "eval", "valid", "validation",
    }
)  # fmt: skip

THROUGHPUT = frozenset({"samples/s", "tokens/s", "tflops"})
_SEPARATORS = re.compile(r"[\s\-]+")


class Goal(Enum):
    """Which way is better for a metric: what its best value is, what its trend means."""

    LOWER = "lower"
    HIGHER = "higher"
    NONE = "none"


def canonical_name(key: str) -> str:
    """The name a printed key is kept under: `lm loss` -> `loss`, `tps` -> `tokens/s`.

    Composer prints `Train loss/train/total` and `Train lr-DecoupledAdamW/group0`: its
    `Train ` goes, and each optimiser group's learning rate is `lr`."""
    name = _SEPARATORS.sub("_", key.strip().lower())
    if "/" in name and name.startswith("train_"):
        name = name[6:]
    if name.startswith("lr_") and "/group" in name:
        return "lr"
    return ALIASES.get(name, name)


def is_known(text: str) -> bool:
    """Whether a name (or a lower-cased line) speaks of training: loss, accuracy, a rate, the
    learning rate, a norm. The generic readers take a line only if it does, so that a log
    line that merely holds numbers (`port=29500`) is no metric; a chain of `in`, as it runs
    on every line with a digit.
    """
    return (
        "loss" in text or "acc" in text or "lr" in text or "learning" in text
        or "norm" in text or "/s" in text or "tps" in text or "wps" in text
        or "tok" in text or "samples" in text or "mfu" in text or "flop" in text
        or "ppl" in text or "perplex" in text or "per_sec" in text or "s/it" in text
        or "prec" in text
    )  # fmt: skip


def is_throughput(name: str) -> bool:
    """A rate each rank reports for its own work: the job's is the sum over ranks."""
    return name in THROUGHPUT


def goal(name: str) -> Goal:
    """Loss-like metrics are best low, accuracy and throughput high; the rest have no best."""
    if name == "loss_scale":
        return Goal.NONE
    if "loss" in name or name in ("eval_ppl", "perplexity", "step_time_ms"):
        return Goal.LOWER
    if "acc" in name or name in THROUGHPUT or name in ("mfu", "steps/s"):
        return Goal.HIGHER
    return Goal.NONE


def is_loss(name: str) -> bool:
    """A loss: a NaN, an Inf or a jump by orders of magnitude in it is a wrong number."""
    return "loss" in name and name != "loss_scale"
