"""GPU telemetry through a real `ddptui run --headless` (real torchrun, gloo on CPU), with a
stand-in `nvidia-smi` on PATH that replays captures from 2 x H100 (tests/data/gpu/): the node
sampler's loop, the `gpu` events, rank -> GPU from the workers' environment, and the GPU part
of the teardown proof, clean and with a GPU still held by a process of the job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from testbed.gpu_standin import FAKE_SMI
from tests.cases import TRAINER
from tests.procs import outputs, pids_with_tag, until_running

CAPTURE = Path(__file__).parents[1] / "data" / "gpu" / "standin"
GPU0 = "GPU-af5b2fab-eee7-f1e0-23d2-b7ff33aec7f1"


def _env(tmp_path: Path) -> dict[str, str]:
    smi = tmp_path / "smi"
    shutil.copytree(CAPTURE, smi)
    return {
        **os.environ,
        "DDPTUI_STATE_DIR": str(tmp_path / "state"),
        "FAKE_SMI_DIR": str(smi),
        "PATH": f"{FAKE_SMI}{os.pathsep}{os.environ['PATH']}",
        "DDPTUI_GPU_SOURCE": "smi",
    }


def _argv(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ddptui.cli",
        "run",
        "--headless",
        "--nodes",
        "1",
        "--nproc-per-node",
        "2",
        *args,
    ]


def test_gpu_events_map_ranks_and_teardown_proves_gpus_free(tmp_path: Path) -> None:
    env = _env(tmp_path)
    proc = subprocess.run(
        _argv("--gpu-sample-ms", "200", str(TRAINER / "elastic_ddp.py"), "--steps", "1500"),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, events[-1]
    gpu = [e for e in events if e["event"] == "gpu"]
    assert len(gpu) >= 5
    assert {e["node"] for e in gpu} == {"local0"}
    first = gpu[0]["gpus"]
    assert [g["index"] for g in first] == [0, 1]
    assert first[0] == {
        "index": 0,
        "util": 0,
        "mem_used_mib": 1281,
        "mem_total_mib": 81559,
        "power_w": 118.94,
        "temp_c": 38,
        "ranks": first[0]["ranks"],
        "uuid": GPU0,
        "sm_mhz": None,  # the stand-in's query has no clock column
        "throttle": [],
    }
    # once the workers run, each local rank is on the GPU its LOCAL_RANK names
    mapped = [e for e in gpu if any(g["ranks"] for g in e["gpus"])]
    assert mapped, "no sample mapped a rank to a GPU"
    assert [g["ranks"] for g in mapped[-1]["gpus"]] == [[0], [1]]
    # the sampler is one nvidia-smi loop for the job, not a process a sample
    calls = (Path(env["FAKE_SMI_DIR"]) / "calls.log").read_text().splitlines()
    assert sum("-lms=200" in c for c in calls) == 1
    teardown = [e for e in events if e["event"] == "teardown"]
    assert len(teardown) == 1 and teardown[0]["clean"], teardown
    proof = teardown[0]["gpu"]
    assert proof["clean"] and proof["held"] == []
    assert proof["mem_before_mib"] == [[0, 1281], [1, 993]]
    assert proof["mem_used_mib"] == [[0, 0], [1, 0]]
    # the log on disk is the job's own output: no sample leaked into it
    logs = "".join(p.read_text() for p in Path(events[-1]["run_dir"]).glob("nodes/*.log"))
    assert "ddptui:gpu" not in logs and "step=1500" in logs


def test_sampling_off_sends_no_gpu_events(tmp_path: Path) -> None:
    env = _env(tmp_path)
    proc = subprocess.run(
        _argv("--gpu-sample-ms", "0", str(TRAINER / "envcheck.py")),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, events[-1]
    assert not [e for e in events if e["event"] == "gpu"]
    calls = (Path(env["FAKE_SMI_DIR"]) / "calls.log").read_text()
    assert "-lms" not in calls
    teardown = [e for e in events if e["event"] == "teardown"]
    assert teardown[0]["gpu"]["clean"]  # the proof still asks the GPUs


def test_gpu_still_held_by_a_job_process_fails_the_proof(tmp_path: Path) -> None:
    """The stand-in lists a worker of the job on GPU 0 after teardown (as a driver does for a
    process stuck exiting): the proof fails, naming that PID and its command line."""
    env = _env(tmp_path)
    smi = Path(env["FAKE_SMI_DIR"])
    (smi / "apps.csv").write_text(f"$PID, {GPU0}, 1200\n")
    proc = subprocess.Popen(
        _argv(str(TRAINER / "envcheck.py"), "--sleep", "300"),
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    run_id = until_running(proc, 2, timeout=180)
    worker = next(p for p in pids_with_tag(run_id) if b"LOCAL_RANK=0" in _environ(p))
    (smi / "apps.pid").write_text(f"{worker}\n")
    proc.send_signal(signal.SIGTERM)
    out, _ = outputs(proc, 90)
    events = [json.loads(line) for line in out.splitlines()]
    teardown = [e for e in events if e["event"] == "teardown"]
    assert len(teardown) == 1 and not teardown[0]["clean"]
    proof = teardown[0]["gpu"]
    assert not proof["clean"]
    assert [(h["pid"], h["gpu"], h["mem_mib"]) for h in proof["held"]] == [(worker, 0, 1200)]
    assert "envcheck.py" in proof["held"][0]["command"]
    assert f"GPU 0 held by {worker}" in teardown[0]["detail"]
    assert events[-1]["event"] == "summary" and events[-1]["ok"] is False
    assert not pids_with_tag(run_id)


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []
