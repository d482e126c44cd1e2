"""The node's GPU sampler on its own, against the stand-in `nvidia-smi` (testbed/
fake_gpu/) replaying a 2 x H100 capture: samples grouped per GPU set, the job's workers
found by their tag, the loop gone when the sampler stops, nothing at all without a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.core.node import gpu_sampler
from ddptui.core.node.gpu_sampler import GPU_MARK, GpuSampler, gpu_snapshot, job_workers
from testbed.gpu_standin import FAKE_SMI

CAPTURE = Path(__file__).parents[2] / "data" / "gpu" / "standin"


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    smi = tmp_path / "smi"
    shutil.copytree(CAPTURE, smi)
    monkeypatch.setenv("FAKE_SMI_DIR", str(smi))
    monkeypatch.setenv("PATH", f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DDPTUI_GPU_SOURCE", "smi")
    return smi


def _loops(smi_dir: Path) -> list[int]:
    """PIDs of stand-in nvidia-smi loops reading this test's captures."""
    found = []
    for name in os.listdir("/proc"):
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if b"-lms=" in cmd and f"FAKE_SMI_DIR={smi_dir}".encode() in env:
            found.append(int(name))
    return found


def test_samples_are_whole_gpu_sets_and_the_loop_ends_with_the_sampler(fake_smi: Path) -> None:
    out: list[bytes] = []
    sampler = GpuSampler("DDPTUI_TAG", "no-such-job", 100, out.append)
    sampler.start()
    deadline = time.monotonic() + 30
    while len(out) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _loops(fake_smi)
    sampler.stop()
    assert len(out) >= 6
    records = [json.loads(line.removeprefix(GPU_MARK)) for line in out]
    assert all(line.startswith(GPU_MARK) and line.endswith(b"\n") for line in out)
    assert all([r.split(",")[0] for r in rec["rows"]] == ["0", "1"] for rec in records)
    assert records[0]["rows"][0].startswith("0, GPU-af5b2fab")
    assert records[0]["workers"] == [] and "apps" in records[0]  # every 5th asks for processes
    calls = (fake_smi / "calls.log").read_text().splitlines()
    assert sum("-lms=100" in c for c in calls) == 1
    deadline = time.monotonic() + 5
    while _loops(fake_smi) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _loops(fake_smi)


def test_the_jobs_workers_by_tag_with_their_rank_and_devices() -> None:
    env = {
        **os.environ,
        "DDPTUI_TAG": "run-x.0",
        "LOCAL_RANK": "1",
        "RANK": "5",
        "CUDA_VISIBLE_DEVICES": "2,3",
    }
    agent_env = {k: v for k, v in env.items() if k not in ("LOCAL_RANK", "RANK")}
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    worker = subprocess.Popen(sleep, env=env)
    agent = subprocess.Popen(sleep, env=agent_env)
    try:
        deadline = time.monotonic() + 10
        while not (found := job_workers("DDPTUI_TAG", "run-x.0")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert found == [[worker.pid, 5, 1, "2,3"]]  # the agent has no LOCAL_RANK
    finally:
        for proc in (worker, agent):
            proc.kill()
            proc.wait()


def test_no_gpu_no_sampler_no_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    real_exists = os.path.exists
    monkeypatch.setattr(  # as on a machine without NVIDIA's driver
        gpu_sampler.os.path, "exists", lambda p: p != "/dev/nvidiactl" and real_exists(p)
    )
    assert gpu_snapshot() is None
    out: list[bytes] = []
    sampler = GpuSampler("DDPTUI_TAG", "t", 50, out.append)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    assert out == []


def test_the_helpers_gpu_verb_samples_alone_until_the_jobs_workers_are_gone(
    fake_smi: Path,
) -> None:
    """Slurm's sampler step: `python3 - gpu TAG MS GONE_S` sends samples on stdout, maps the
    tagged worker to its GPU, and ends by itself once that worker has been gone GONE_S."""
    from ddptui.core.node import job_helper_source

    tag = f"gpu-alone-{os.getpid()}"
    worker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "DDPTUI_TAG": tag, "LOCAL_RANK": "1", "RANK": "3"},
    )
    helper = subprocess.Popen(
        [sys.executable, "-S", "-", "gpu", tag, "100", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert helper.stdin is not None and helper.stdout is not None
    helper.stdin.write(job_helper_source())
    helper.stdin.close()
    mapped = None
    try:
        for line in helper.stdout:
            record = json.loads(line.removeprefix(GPU_MARK))
            if record["workers"]:
                mapped = record["workers"]
                break
    finally:
        worker.kill()
        worker.wait()
    assert mapped == [[worker.pid, 3, 1, None]]
    rest = helper.stdout.read()  # samples until the worker has been gone 1 s, then the end
    assert helper.wait(timeout=30) == 0
    assert rest.startswith(GPU_MARK)
    assert not _loops(fake_smi)


def test_the_sm_clock_and_why_it_is_held_down_come_with_each_sample(
    fake_smi: Path,
) -> None:
    """clocks.sm and clocks_throttle_reasons.active (nvidia-smi's hex bitmask) travel in
    the sample and read as the GPU's SM clock and its slow-down reasons."""
    from ddptui.core.monitor.gpu import read_sample

    shutil.copy(CAPTURE.parent / "throttle" / "loop.csv", fake_smi / "loop.csv")
    out: list[bytes] = []
    sampler = GpuSampler("DDPTUI_TAG", "no-such-job", 100, out.append)
    sampler.start()
    deadline = time.monotonic() + 30
    while not out and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler.stop()
    record = json.loads(out[0].removeprefix(GPU_MARK))
    assert "clocks.sm" in record["fields"] and "clocks_throttle_reasons.active" in record["fields"]
    gpus = read_sample(record)
    assert [(g.index, g.sm_mhz, g.throttle) for g in gpus] == [
        (0, 1980, ()),
        (1, 1410, ("power cap", "thermal")),
    ]
