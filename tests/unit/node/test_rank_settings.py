"""The workers' settings report, from the real worker hook in a real Python worker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from ddptui.core.node import worker_hook_source

SCRIPT = """
import os, sys, time
if sys.argv[1] == "gloo":
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=0, world_size=1)
    time.sleep(1.0)  # the hook looks for the group five times a second
    dist.destroy_process_group()
else:
    time.sleep(0.5)  # the report is written by then; it imported nothing of torch
    print("torch imported" if "torch" in sys.modules else "torch not imported", flush=True)
print("worker done", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """One rank (RANK=0) started as torchrun starts it, the hook as its sitecustomize."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_bytes(worker_hook_source())
    debug = tmp_path / "debug"
    env = {
        **os.environ,
        "PYTHONPATH": str(hook),
        "DDPTUI_DEBUG_DIR": str(debug),
        "DDPTUI_COLLECTIVES_S": "0",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "NCCL_IB_DISABLE": "1",
        "NCCL_NET_PLUGIN_TOKEN": "not-for-anyone",
        "GLOO_SOCKET_IFNAME": "lo",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{debug}/fr/nccl_rank_",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True, text=True, timeout=120
    )
    path = debug / "collectives" / "settings_rank_0.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return done, [json.loads(line) for line in lines]


def test_a_worker_reports_at_start_and_once_its_group_exists(tmp_path: Path) -> None:
    done, reports = _worker(tmp_path, "gloo")
    assert done.returncode == 0 and done.stdout == "worker done\n", done.stderr
    assert [r["stage"] for r in reports] == ["start", "init"], reports
    start, init = reports
    assert start["settings"] == 1 and start["rank"] == 0 and start["local_rank"] == 0
    import torch

    assert start["torch"] == init["torch"] == torch.__version__
    assert start["env"] == {
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_IB_DISABLE": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "${DDPTUI_DEBUG_DIR}/fr/nccl_rank_",
    }
    assert start["hidden"] == ["NCCL_NET_PLUGIN_TOKEN"]
    assert init["backend"] == "gloo" and init["pg_timeout_s"] == 1800.0
    text = (tmp_path / "debug" / "collectives" / "settings_rank_0.jsonl").read_text()
    assert "not-for-anyone" not in text


def test_a_worker_that_never_forms_a_group_reports_its_start_alone(tmp_path: Path) -> None:
    done, reports = _worker(tmp_path, "plain")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "torch not imported\nworker done\n", done.stdout
    assert [r["stage"] for r in reports] == ["start"]
    import torch

    assert reports[0]["torch"] == torch.__version__  # read from torch/version.py as text


def test_a_debug_directory_it_cannot_write_costs_the_report_only(tmp_path: Path) -> None:
    from ddptui.core.node.rank_settings import start_settings

    blocked = tmp_path / "debug"
    blocked.write_text("a file where the directory should be")
    assert start_settings(str(blocked), 0, 0) is None
