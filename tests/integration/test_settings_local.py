"""Settings checked across ranks on the local backend: pseudo-nodes that share one machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cases import TRAINER


def test_pseudo_nodes_agree_before_the_first_step_and_raise_no_incident(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable, "-m", "ddptui.cli", "run", "--headless", "--env",
            "NCCL_DEBUG=WARN", "--env", "NCCL_NET_PLUGIN_TOKEN=not-for-anyone",
            str(TRAINER / "cpu_ddp.py"), "3", "2", "--checkpoint_path", str(tmp_path / "s.pt"),
        ],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (events[-1:], proc.stderr[-2000:])
    kinds = [e["event"] for e in events]
    first = kinds.index("settings")
    assert first < kinds.index("metric"), kinds  # said before any rank's first step
    settings = [e for e in events if e["event"] == "settings"]
    assert settings[0]["complete"] and settings[0]["ranks"] == 4
    assert all(s["differences"] == [] and s["bad_nccl"] == [] for s in settings), settings
    common = settings[-1]["common"]
    assert common["NCCL_DEBUG"] == "WARN" and common["NCCL_NET_PLUGIN_TOKEN"] == "***"
    assert common["backend"] == "gloo", common
    incidents = [e["kind"] for e in events if e["event"] == "incident"]
    assert not {"settings_differ", "known_bad_nccl"} & set(incidents), incidents
    run_dir = Path(events[-1]["run_dir"])
    assert "not-for-anyone" not in (run_dir / "events.jsonl").read_text()
