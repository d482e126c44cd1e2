"""Pseudo-nodes on one GPU machine: a disjoint CUDA_VISIBLE_DEVICES each, or a refusal."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ddptui.core.backends.factory import preview_plan
from ddptui.core.backends.local import local_gpus, local_plan, machine_gpus
from ddptui.core.job.gpus import CUDA_VISIBLE, split_gpus
from ddptui.core.job.plan import NodeTarget
from ddptui.core.job.spec import JobSpec, SpecError, make_spec

CAPTURE = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h100x2_preflight"


def spec(nodes: int = 2, nproc: int = 2, **fields: object) -> JobSpec:
    return make_spec(script="x.py", nodes=nodes, nproc_per_node=nproc, **fields)


def test_each_pseudo_node_gets_its_own_gpus() -> None:
    assert split_gpus(spec(2, 2), 4, {}) == ("0,1", "2,3")
    assert split_gpus(spec(2, 1), 2, {}) == ("0", "1")
    assert split_gpus(spec(1, 2), 8, {}) == ("0,1",)
    assert split_gpus(spec(3, 2), 8, {}) == ("0,1", "2,3", "4,5")  # GPUs 6, 7 left free


def test_no_gpu_means_nothing_changes() -> None:
    assert split_gpus(spec(2, 2), 0, {}) is None


def test_too_many_gpus_asked_is_refused_with_the_counts() -> None:
    with pytest.raises(SpecError) as err:
        split_gpus(spec(2, 2), 2, {})
    said = str(err.value)
    assert said.startswith(
        "the job needs 4 GPUs (2 pseudo-nodes x 2 processes), this machine has 2:"
    )
    assert "--nodes 1 --nproc-per-node 2" in said and "--nodes 2 --nproc-per-node 1" in said
    assert f"--env {CUDA_VISIBLE}=" in said and "\n" not in said


def test_the_operators_cuda_visible_devices_is_split() -> None:
    mine = spec(2, 1, env={CUDA_VISIBLE: "3,1"})
    assert split_gpus(mine, 4, {}) == ("3", "1")
    uuids = spec(1, 2, env={CUDA_VISIBLE: "GPU-a, GPU-b"})
    assert split_gpus(uuids, 4, {}) == ("GPU-a,GPU-b",)
    assert split_gpus(spec(2, 1), 8, {CUDA_VISIBLE: "6,7"}) == ("6", "7")  # the console's
    with pytest.raises(
        SpecError,
        match=r"needs 2 GPUs \(2 pseudo-nodes x 1 process\), "
        r"CUDA_VISIBLE_DEVICES=5 \(--env\) gives it 1:",
    ):
        split_gpus(spec(2, 1, env={CUDA_VISIBLE: "5"}), 8, {})


@pytest.mark.parametrize("hidden", ["", "-1", " "])
def test_hidden_gpus_make_a_cpu_job(hidden: str) -> None:
    assert split_gpus(spec(2, 2, env={CUDA_VISIBLE: hidden}), 2, {}) is None
    assert split_gpus(spec(2, 2), 2, {CUDA_VISIBLE: hidden}) is None


def test_split_off_or_containers_leave_the_gpus_alone() -> None:
    assert split_gpus(spec(2, 2, gpu_split=False), 2, {}) is None
    boxed = spec(2, 2, container={"image": "img"})
    assert split_gpus(boxed, 2, {}) is None


def test_the_plan_shows_each_pseudo_nodes_gpus_in_its_exact_command() -> None:
    nodes = [NodeTarget("local0", "127.0.0.1"), NodeTarget("local1", "127.0.0.1")]
    plan = local_plan(spec(2, 2, env={"A": "1"}), nodes, "r1", 29500, ("0,1", "2,3"))
    assert [c.env[CUDA_VISIBLE] for c in plan.commands] == ["0,1", "2,3"]
    assert "CUDA_VISIBLE_DEVICES=0,1 " in plan.commands[0].shell_line()
    assert "CUDA_VISIBLE_DEVICES=2,3 " in plan.commands[1].shell_line()
    assert plan.to_dict()["commands"][1]["env"][CUDA_VISIBLE] == "2,3"
    plain = local_plan(spec(2, 2), nodes, "r1", 29500)
    assert CUDA_VISIBLE not in plain.commands[0].env


def _stand_in_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listing: str) -> None:
    """An `nvidia-smi` that answers --list-gpus as the real one did on 2 x H100."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{listing}EOF\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(CUDA_VISIBLE, raising=False)


def h100_listing() -> str:
    """`nvidia-smi --list-gpus` as a 2 x H100 machine printed it (bench/gpu/preflight.py)."""
    return (CAPTURE / "nvidia_smi_list_gpus.txt").read_text()


def test_the_machine_gpu_count_comes_from_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_smi(tmp_path, monkeypatch, h100_listing())
    assert machine_gpus() == 2
    with pytest.raises(SpecError, match="needs 4 GPUs"):
        local_gpus(spec(2, 2))
    assert local_gpus(spec(2, 1)) == ("0", "1")
    preview = preview_plan(spec(2, 1), "r1", 29500)
    assert [c.env[CUDA_VISIBLE] for c in preview.commands] == ["0", "1"]
    assert CUDA_VISIBLE not in preview_plan(spec(2, 2), "r1", 29500).commands[0].env


def test_no_nvidia_smi_is_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert machine_gpus() == 0
    assert local_gpus(spec(2, 2)) is None
