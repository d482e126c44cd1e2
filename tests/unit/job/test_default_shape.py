"""The default job fits the machine's GPUs (0, 1, 2, 4, 8); a shape someone chose is kept."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ddptui.core.backends.local import local_gpus
from ddptui.core.job.gpus import CUDA_VISIBLE
from ddptui.core.job.resolve import resolve_job
from ddptui.core.job.spec import SpecError


def _gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """A stand-in `nvidia-smi --list-gpus` that lists `count` H100s."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    smi = bindir / "nvidia-smi"
    rows = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\n" for i in range(count))
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{rows}EOF\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(CUDA_VISIBLE, raising=False)


@pytest.mark.parametrize(
    ("count", "shape", "split"),
    [
        (0, (2, 2), None),
        (2, (2, 1), ("0", "1")),
        (4, (2, 2), ("0,1", "2,3")),
        (8, (2, 4), ("0,1,2,3", "4,5,6,7")),
    ],
)
def test_the_default_job_runs_on_every_gpu_count(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    count: int,
    shape: tuple[int, int],
    split: tuple[str, ...] | None,
) -> None:
    _gpus(tmp_path, monkeypatch, count)
    spec = resolve_job({})
    assert (spec.nodes, spec.nproc_per_node) == shape
    assert local_gpus(spec) == split  # never refused
    if count:
        assert spec.shape_note.startswith(f"this machine has {count} GPUs: the default job runs")
        assert "one GPU each" in spec.shape_note
    else:
        assert spec.shape_note == ""


def test_one_gpu_runs_two_pseudo_nodes_on_the_cpu_and_says_how_to_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _gpus(tmp_path, monkeypatch, 1)
    spec = resolve_job({})
    assert (spec.nodes, spec.nproc_per_node) == (2, 1)
    assert spec.env[CUDA_VISIBLE] == ""
    assert local_gpus(spec) is None  # hidden: gloo on the CPU, not split
    assert spec.shape_note == (
        "this machine has 1 GPU: the default job runs 2 pseudo-nodes x 1 process on the CPU "
        "(gloo); --nodes 1 --nproc-per-node 1 uses the GPU"
    )
    asked = resolve_job({"nodes": 1, "nproc_per_node": 1})
    assert (asked.nodes, asked.nproc_per_node, asked.shape_note) == (1, 1, "")
    assert local_gpus(asked) == ("0",)


def test_the_operators_visible_devices_are_what_is_fitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _gpus(tmp_path, monkeypatch, 8)
    monkeypatch.setenv(CUDA_VISIBLE, "5,6,7")
    spec = resolve_job({})
    assert (spec.nodes, spec.nproc_per_node) == (2, 1)
    assert local_gpus(spec) == ("5", "6")
    assert spec.shape_note.startswith(f"{CUDA_VISIBLE}=5,6,7 (this environment) gives it 3 GPUs")
    assert "(GPU 7 stays free)" in spec.shape_note


def test_an_explicit_shape_that_does_not_fit_is_still_refused_with_the_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _gpus(tmp_path, monkeypatch, 2)
    for given in ({"nproc_per_node": 2}, {"nodes": 2, "nproc_per_node": 2}):
        spec = resolve_job(given)
        assert spec.shape_note == ""
        with pytest.raises(SpecError, match=r"needs 4 GPUs \(2 pseudo-nodes x 2 processes\), "):
            local_gpus(spec)
    one = resolve_job({"nodes": 3})  # 3 x 2 asked: kept, refused at launch
    assert (one.nodes, one.nproc_per_node) == (3, 2)


def test_a_profile_of_the_operators_keeps_its_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _gpus(tmp_path, monkeypatch, 2)
    spec = resolve_job({}, "env-check")  # a preset that is not the default job
    assert spec.nproc_per_node == 2 and spec.shape_note == ""
