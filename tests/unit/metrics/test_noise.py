"""Lines that hold numbers but no metric never yield one, whatever their numbers and words.

Generated in the shapes real logs take: Python warnings with `file:line`, paths (with
`key=value` parts, as checkpoints are named), timestamps and PIDs, versions, tqdm bars'
counts and torchrun's glog-style lines; their words include the metrics' own (`loss`, `lr`,
`acc`), which is what lets them past the readers' first test.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.core.metrics.formats import parse_line
from ddptui.core.metrics.reader import MetricReader

NOISE = settings(max_examples=300, deadline=None)

SEGMENTS = st.sampled_from(
    [
        "root", ".pyenv", "versions", "3.11.7", "lib", "python3.11", "site-packages", "torch",
        "optim", "lr_scheduler", "accelerate", "torchft", "checkpointing", "_serialization",
        "loss", "nn", "modules", "ckpt", "runs", "loss_curve", "epoch=3", "lr=0.001",
        "step_1200", "val_loss=0.1234", "global_step100", "v1.2.3", "acc_0.91", "tokenizer",
        "samples", "norm", "data", "shakespeare_char", "run-2024-05-01", "seed=42",
    ]
)  # fmt: skip
EXTENSIONS = st.sampled_from([".py", ".cpp", ".pt", ".ckpt", ".json", ".log", ""])
WARNINGS = st.sampled_from(
    [
        "UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`.",
        "UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
        "FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated.",
        "UserWarning: loss of precision when casting (lr, step, loss_scale)",
        "DeprecationWarning: the accelerate tokenizer option is deprecated since 0.21.0",
        "UserWarning: Using a target size (torch.Size([32])) that is different to the "
        "input size (torch.Size([32, 1])).",
    ]
)
MESSAGES = st.sampled_from(
    [
        "[default] Rendezvous complete for workers. Result:",
        "  restart_count=0",
        "  master_port=29500",
        "  local_ranks=[0, 1]",
        "  global_ranks=[2, 3]",
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
        "Loaded lr_scheduler and loss scaler states",
        "Starting elastic_operator with launch configs: nproc_per_node=4 max_restarts=0",
    ]
)
BAR_WORDS = st.sampled_from(
    ["", "Map", "Evaluating loss", "Loading checkpoint shards", "Tokenizing samples",
     "Running tokenizer on dataset", "Downloading", "Validation acc", "lr sweep"]
)  # fmt: skip
BAR_UNITS = st.sampled_from(["it/s", "s/it", "examples/s", "ba/s", "MB/s", "B/s", "files/s"])
KNOWN_WORDS = st.sampled_from(["loss", "lr_scheduler", "accelerate", "tokens", "grad norm"])


def no_metric(line: str) -> bool:
    reader = MetricReader()
    return parse_line(line) is None and reader.read(0, line) is None


@st.composite
def paths(draw: st.DrawFn) -> str:
    parts = draw(st.lists(SEGMENTS, min_size=2, max_size=8))  # a path has a `/`
    # Rooted: a bare `runs/lr=0.001` is a wandb-style key (`train/loss=0.5`) as much as a path.
    lead = draw(st.sampled_from(["/", "./", "~/", "../"]))
    return lead + "/".join(parts) + draw(EXTENSIONS)


@st.composite
def clocks(draw: st.DrawFn) -> str:
    y, mo, d = draw(st.integers(2000, 2099)), draw(st.integers(1, 12)), draw(st.integers(1, 28))
    h, mi, s = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    micro = draw(st.integers(0, 999999))
    return draw(
        st.sampled_from(
            [
                f"{y}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d},{micro // 1000:03d}",
                f"[{y}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}]",
                f"{mo:02d}/{d:02d}/{y} {h:02d}:{mi:02d}:{s:02d}",
                f"{y}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}.{micro:06d}Z",
                f"{h:02d}:{mi:02d}:{s:02d}.{micro:06d}",
            ]
        )
    )


@NOISE
@given(paths(), st.integers(1, 99999), WARNINGS)
def test_a_python_warning_is_no_metric(path: str, line_number: int, warning: str) -> None:
    assert no_metric(f"{path}:{line_number}: {warning}")


@NOISE
@given(paths(), st.sampled_from(["Saving checkpoint to", "Loading best model from", ""]))
def test_a_path_is_no_metric(path: str, words: str) -> None:
    assert no_metric(f"{words} {path}".strip())
    assert no_metric(f"{words} '{path}' (loss curve kept)")


@NOISE
@given(clocks(), st.integers(1, 4_194_304), KNOWN_WORDS, st.integers(0, 99))
def test_timestamps_and_pids_are_no_metric(clock: str, pid: int, word: str, n: int) -> None:
    assert no_metric(f"{clock} worker pid={pid} started ({word} ready)")
    assert no_metric(f"{clock} - INFO - {word} built by process {pid} at {clock}")
    assert no_metric(f"[{clock}] [INFO] [{word}.py:{n}:init] pid: {pid}")


@NOISE
@given(
    st.tuples(st.integers(0, 20), st.integers(0, 99), st.integers(0, 99)),
    st.sampled_from(["torch", "accelerate", "tokenizers", "NCCL version", "Python", "lr-lib"]),
    st.sampled_from(["", "+cu124", "+cuda12.4", ".post1", "rc1"]),
)
def test_versions_are_no_metric(version: tuple[int, int, int], name: str, tail: str) -> None:
    major, minor, patch = version
    assert no_metric(f"{name} {major}.{minor}.{patch}{tail}")
    assert no_metric(f"Using {name} v{major}.{minor}.{patch}{tail} with the loss scaler")


@NOISE
@given(
    BAR_WORDS,
    st.integers(1, 10**6),
    st.integers(0, 100),
    st.floats(0.01, 10**5, allow_nan=False),
    BAR_UNITS,
)
def test_a_progress_bars_counts_are_no_metric(
    words: str, total: int, percent: int, rate: float, unit: str
) -> None:
    done = total * percent // 100
    desc = f"{words}: " if words else ""
    drawn = "█" * (percent // 10)
    bar = f"{desc}{percent:3d}%|{drawn:10s}| {done}/{total} [00:10<00:12, {rate:.2f}{unit}]"
    assert no_metric(bar)


@NOISE
@given(st.integers(0, 10**6), st.floats(0.0, 100.0, allow_nan=False), st.integers(1, 10**5))
def test_a_bar_after_a_metric_adds_no_count(step: int, loss: float, total: int) -> None:
    """A script's own description on a tqdm bar: its pairs are read, the bar's counts not."""
    line = (
        f"step={step} loss={loss:.4f}: 50%|█████     | {total // 2}/{total} [00:10<00:10, 2.00it/s]"
    )
    found = parse_line(line)
    assert found is not None and found.step == step
    assert found.values == {"loss": float(f"{loss:.4f}"), "steps/s": 2.0}


@NOISE
@given(
    st.sampled_from("IWE"),
    st.integers(101, 1231),
    clocks(),
    st.integers(1, 4_194_304),
    paths(),
    st.integers(1, 9999),
    MESSAGES,
)
def test_torchrun_glog_lines_are_no_metric(
    level: str, day: int, clock: str, pid: int, path: str, line_number: int, message: str
) -> None:
    clock = clock.rpartition(" ")[2]
    assert no_metric(f"{level}{day:04d} {clock} {pid} {path}:{line_number}] {message}")
    assert no_metric(f"[rank0]:[{level}{day:04d} {clock} {pid} {path}:{line_number}] {message}")
