"""Pseudo-nodes on a GPU machine get their own GPUs: real `ddptui run --headless`, real
torchrun, with a stand-in `nvidia-smi` that lists 4 GPUs (this machine has none; torch runs on
the CPU and ignores CUDA_VISIBLE_DEVICES, so the job still runs, on gloo). What is checked is
what the console does with the count: the exact commands, the environment each rank got.
On real GPUs: bench/gpu/preflight.py (bench/results/gpu_preflight_h100x2.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.cases import TRAINER


def _listing(count: int) -> str:
    return "".join(f"echo 'GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})'\n" for i in range(count))


def _headless(
    tmp_path: Path, *args: str, gpus: int = 4, stderr: list[str] | None = None
) -> tuple[int, list[dict]]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + _listing(gpus))
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(DDPTUI_STATE_DIR=str(tmp_path / "state"), PATH=f"{bindir}:{env['PATH']}")
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--lines", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if stderr is not None:
        stderr.append(proc.stderr)
    return proc.returncode, events


VISIBLE = re.compile(r"envcheck host=\S+ local_rank=\d+ rank=(\d+) .* visible=(\S+)")


def _visible_by_rank(events: list[dict]) -> dict[tuple[str, int], str]:
    """(node, global rank) -> what CUDA_VISIBLE_DEVICES that rank saw (envcheck's words)."""
    seen = {}
    for e in events:
        if e["event"] == "line":
            m = VISIBLE.search(e["text"])
            if m:
                seen[(e["node"], int(m[1]))] = m[2]
    return seen


def test_each_pseudo_node_sees_only_its_own_gpus(tmp_path: Path) -> None:
    code, events = _headless(tmp_path, str(TRAINER / "envcheck.py"))
    summary = events[-1]
    assert code == 0, summary
    plan = next(e for e in events if e["event"] == "plan")
    lines = dict(plan["commands"])
    assert "CUDA_VISIBLE_DEVICES=0,1 " in lines["local0"]
    assert "CUDA_VISIBLE_DEVICES=2,3 " in lines["local1"]
    granted = next(e for e in events if e["event"] == "allocation")
    assert granted["detail"] == "this machine, GPUs 0,1 | 2,3"
    seen = _visible_by_rank(events)
    assert sorted(rank for _node, rank in seen) == [0, 1, 2, 3]
    # c10d numbers the nodes as they join: local1 may hold ranks 0 and 1
    assert sorted(seen.items()) == sorted(
        ((node, rank), "0,1" if node == "local0" else "2,3") for node, rank in seen
    )
    assert sorted(node for node, _rank in seen) == ["local0"] * 2 + ["local1"] * 2
    run_dir = Path(summary["run_dir"])
    assert "CUDA_VISIBLE_DEVICES=2,3 " in (run_dir / "commands.sh").read_text()
    saved = json.loads((run_dir / "plan.json").read_text())
    assert [c["env"]["CUDA_VISIBLE_DEVICES"] for c in saved["commands"]] == ["0,1", "2,3"]


def test_hidden_gpus_run_the_job_on_the_cpu_unsplit(tmp_path: Path) -> None:
    code, events = _headless(
        tmp_path, "--env", "CUDA_VISIBLE_DEVICES=", "--nodes", "3", str(TRAINER / "envcheck.py")
    )
    assert code == 0, events[-1]
    assert set(_visible_by_rank(events).values()) == {"-"}


def test_the_default_job_on_two_gpus_runs_one_process_per_pseudo_node(tmp_path: Path) -> None:
    code, events = _headless(tmp_path, gpus=2)  # no flags at all: the default job
    assert code == 0, events[-1]
    notices = [e["message"] for e in events if e["event"] == "notice"]
    assert (
        "this machine has 2 GPUs: the default job runs 2 pseudo-nodes x 1 process, one GPU each"
        in notices
    )
    lines = dict(next(e for e in events if e["event"] == "plan")["commands"])
    assert "CUDA_VISIBLE_DEVICES=0 " in lines["local0"]
    assert "CUDA_VISIBLE_DEVICES=1 " in lines["local1"]
    assert "--nproc_per_node=1" in lines["local0"]
    seen = _visible_by_rank(events)
    assert sorted(seen.items()) == sorted(
        ((node, rank), "0" if node == "local0" else "1") for node, rank in seen
    )
    assert sorted(rank for _node, rank in seen) == [0, 1]


def test_the_default_job_on_one_gpu_runs_on_the_cpu_and_says_so(tmp_path: Path) -> None:
    code, events = _headless(tmp_path, gpus=1)
    assert code == 0, events[-1]
    notices = [e["message"] for e in events if e["event"] == "notice"]
    assert (
        "this machine has 1 GPU: the default job runs 2 pseudo-nodes x 1 process on the CPU "
        "(gloo); --nodes 1 --nproc-per-node 1 uses the GPU"
    ) in notices
    seen = _visible_by_rank(events)
    assert sorted(rank for _node, rank in seen) == [0, 1]
    assert set(seen.values()) == {"-"}  # CUDA hidden from every rank


def test_an_explicit_shape_too_big_is_refused_with_the_counts(tmp_path: Path) -> None:
    said: list[str] = []
    code, events = _headless(tmp_path, "--nproc-per-node", "2", gpus=2, stderr=said)
    assert (code, events) == (2, [])  # refused before anything starts
    assert "the job needs 4 GPUs (2 pseudo-nodes x 2 processes), this machine has 2" in said[0]
