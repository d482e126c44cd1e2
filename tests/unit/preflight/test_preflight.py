"""`ddptui preflight` for real on the local backend: this machine's python, torch and ports."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ddptui.core.preflight.preflight import CHECKS
from tests.cases import ROOT


def preflight(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "preflight", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    return proc.returncode, proc.stdout, proc.stderr


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_headless_preflight_of_the_default_job_is_json_lines_and_passes(tmp_path: Path) -> None:
    code, out, err = preflight(tmp_path, "--headless")
    seen = events(out)
    assert code == 0, (out, err)
    checks = [e for e in seen if e["event"] == "check"]
    assert {(e["node"], e["check"]) for e in checks} == {
        (n, c) for n in ("local0", "local1") for c in CHECKS
    }
    assert {e["status"] for e in checks} == {"ok"}
    torch = next(e for e in checks if e["check"] == "torch")
    assert torch["detail"].startswith("2.")  # the version python3 -c reported on the node
    # the gang test ran as a job of its own (real torchrun, gloo) and each node reported
    gang = [e["detail"] for e in checks if e["check"] == "gang"]
    assert len(gang) == 2
    said = re.compile(r"its 2 ranks [\d.]+ GB/s; all 4 ranks [\d.]+ GB/s \(gloo")
    assert all(said.match(d) for d in gang), gang
    assert seen[-1]["event"] == "preflight" and seen[-1]["ok"] is True


def test_a_squatted_rendezvous_port_fails_with_a_fix(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = squatter.getsockname()[1]
        code, out, err = preflight(tmp_path, "--headless", "--rdzv-port", str(port))
    assert code == 1, (out, err)
    bad = [e for e in events(out) if e["event"] == "check" and e["status"] == "fail"]
    assert [(e["node"], e["check"]) for e in bad] == [("local0", "rdzv-port")]
    assert "Address already in use" in bad[0]["detail"]
    assert "--rdzv-port" in bad[0]["fix"]
    assert events(out)[-1]["failed"] == ["local0: rdzv-port"]
    skipped = [e for e in events(out) if e["event"] == "check" and e["check"] == "gang"]
    assert {e["status"] for e in skipped} == {"skip"}
    assert skipped[0]["detail"] == "not run: rdzv-port on local0 failed"


@pytest.mark.parametrize("headless", [True, False])
def test_a_missing_script_is_a_failed_check(tmp_path: Path, headless: bool) -> None:
    args = ["--headless"] if headless else []
    code, out, err = preflight(tmp_path, *args, "--nodes", "1", "missing.py")
    assert code == 1, (out, err)
    if headless:
        bad = [e for e in events(out) if e.get("status") == "fail"]
        assert [(e["node"], e["check"]) for e in bad] == [("local0", "script")]
        assert bad[0]["detail"] == f"{tmp_path / 'missing.py'} not found"
    else:
        lines = out.splitlines()
        header = next(line for line in lines if line.startswith("NODE"))
        assert header.split() == ["NODE", *CHECKS]
        row = next(line for line in lines if line.startswith("local0")).split()
        script = CHECKS.index("script")
        assert row[1:] == ["✓"] * script + ["✗"] + ["✓"] * (len(CHECKS) - script - 1)
        assert any(f"✗ local0 script: {tmp_path / 'missing.py'} not found" in x for x in lines)
        assert any(x.strip().startswith("fix: copy it to every node") for x in lines)
        assert lines[-1].startswith("NOT ready: 1 check(s) failed")
