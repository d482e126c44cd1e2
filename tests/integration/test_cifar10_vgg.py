"""trainer/cifar10_vgg.py for real: CIFAR-10's python batch format (pickled by numpy, read
without it), srun-style ranks (--launch srun), torchrun, and the generated-data fallback."""

from __future__ import annotations

import pickle
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.integration.test_trainer_scripts import (
    TRAINER,
    assert_clean,
    base_env,
    free_port,
    run_all,
    run_torchrun,
)

pytestmark = pytest.mark.integration

EPOCH_RE = re.compile(
    r"^rank (?P<rank>\d+) epoch=(?P<epoch>\d+)/(?P<epochs>\d+) loss=(?P<loss>[\d.]+) "
    r"train_acc=(?P<train>[\d.]+) test_acc=(?P<test>[\d.]+) samples/s=(?P<rate>[\d.]+)$"
)
SMALL = ["--samples", "64", "--batch-size", "16"]


def write_batches(root: Path, per_batch: int = 16) -> dict[str, list[int]]:
    """CIFAR-10's layout: data_batch_1..5 and test_batch, dicts of numpy uint8 rows
    (3072 bytes: R, G, B planes of 32x32) and label lists, pickled by numpy as the real
    files are (`b"data"`, `b"labels"` keys)."""
    root.mkdir()
    rng = np.random.default_rng(0)
    labels: dict[str, list[int]] = {}
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        labels[name] = [int(x) for x in rng.integers(0, 10, per_batch)]
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        batch = {b"batch_label": name.encode(), b"labels": labels[name], b"data": data}
        (root / name).write_bytes(pickle.dumps(batch, protocol=2))
    return labels


def test_reads_cifar_batches_without_numpy(tmp_path: Path) -> None:
    """The reader maps numpy's pickle to torch tensors, byte for byte."""
    write_batches(tmp_path / "cifar")
    sys.path.insert(0, str(TRAINER))
    try:
        import cifar10_vgg
    finally:
        sys.path.remove(str(TRAINER))
    images, labels = cifar10_vgg.read_batch(tmp_path / "cifar" / "data_batch_2")
    with (tmp_path / "cifar" / "data_batch_2").open("rb") as f:
        raw = pickle.load(f, encoding="bytes")
    assert images.shape == (16, 3, 32, 32)
    assert images.reshape(16, -1).numpy().tobytes() == raw[b"data"].tobytes()
    assert labels.tolist() == raw[b"labels"]


def test_srun_style_two_tasks_on_cifar_batches(tmp_path: Path) -> None:
    """As `srun -N2 -n2 python cifar10_vgg.py --launch srun` starts it: no torchrun; a stray
    RANK in the environment does not win over SLURM_PROCID with --launch srun."""
    write_batches(tmp_path / "cifar")
    port = str(free_port())
    envs = [
        base_env(
            SLURM_PROCID=str(i),
            SLURM_NTASKS="2",
            SLURM_LOCALID="0",
            SLURM_NODEID=str(i),
            SLURM_TASKS_PER_NODE="1(x2)",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            RANK="7",
            WORLD_SIZE="9",
        )
        for i in range(2)
    ]
    args = ["--launch", "srun", "--data", str(tmp_path / "cifar"), "--epochs", "2", *SMALL]
    cmds = [[sys.executable, str(TRAINER / "cifar10_vgg.py"), *args] for _ in range(2)]
    results = run_all(cmds, tmp_path, envs)
    for result in results:
        assert_clean(result)
    assert results[0].lines[0] == (
        f"cifar10-vgg data=cifar10 dir={tmp_path / 'cifar'} train=64 test=16"
    )
    epochs = [
        (int(m["rank"]), int(m["epoch"]))
        for r in results
        for line in r.lines
        if (m := EPOCH_RE.match(line))
    ]
    assert sorted(epochs) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert [r.lines[-1] for r in results] == ["rank 0 finished", "rank 1 finished"]


def test_torchrun_on_generated_data_says_so_first(tmp_path: Path) -> None:
    result = run_torchrun("cifar10_vgg.py", ["--data", str(tmp_path / "none"), *SMALL], tmp_path)
    assert_clean(result)
    assert result.lines[0].startswith(
        f"cifar10-vgg data=generated (no CIFAR-10 batches in {tmp_path / 'none'})"
    )
    found = [m for line in result.lines if (m := EPOCH_RE.match(line))]
    assert sorted(int(m["rank"]) for m in found) == [0, 1]
    assert all(0.0 <= float(m["train"]) <= 1.0 and float(m["loss"]) > 0 for m in found)


def test_srun_launch_without_slurm_is_a_clear_error(tmp_path: Path) -> None:
    result = run_all(
        [[sys.executable, str(TRAINER / "cifar10_vgg.py"), "--launch", "srun"]],
        tmp_path,
        [base_env(RANK="0", WORLD_SIZE="1")],
    )[0]
    assert result.code == 2
    assert "--launch srun: SLURM_PROCID is not set" in result.stderr
