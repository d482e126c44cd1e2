"""`ddptui run --headless` on the local backend: real torchrun, real c10d, real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cases import TRAINER, TRAINERS, trainer_args
from tests.integration.sshrun import rank_steps
from tests.procs import outputs, pids_with_tag


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}


def _headless(tmp_path: Path, *args: str, timeout: float = 240) -> tuple[int, list[dict]]:
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, events


@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        *TRAINERS,
        (
            "cifar10_vgg.py",
            ["--epochs", "1", "--samples", "96", "--batch-size", "12"],
            "epoch=1/1 loss=",
        ),
    ],
)
def test_trainer_script_runs_green_then_done(
    tmp_path: Path, script: str, args: list[str], expect: str
) -> None:
    code, events = _headless(tmp_path, str(TRAINER / script), *trainer_args(args, tmp_path))
    summary = events[-1]
    assert summary["event"] == "summary", events[-3:]
    assert code == 0, summary
    assert summary["ok"] is True and summary["world_size"] == 4
    assert [r["state"] for r in summary["ranks"]] == ["done"] * 4
    assert sorted(r["rank"] for r in summary["ranks"]) == [0, 1, 2, 3]
    for rank, states in rank_steps(events).items():
        assert states[-3:] == ["assigned", "running", "done"], (rank, states)
    teardown = [e for e in events if e["event"] == "teardown"]
    assert len(teardown) == 2 and all(t["clean"] for t in teardown)
    run_dir = Path(summary["run_dir"])
    logs = sorted((run_dir / "nodes").glob("*.log"))
    assert len(logs) == 2
    text = "".join(p.read_text() for p in logs)
    assert text.count(expect) >= (1 if script == "cpu_ddp.py" else 4)
    assert "torchrun" in (run_dir / "commands.sh").read_text()
    assert not pids_with_tag(summary["run_id"])


def test_crashing_rank_is_reported_and_others_stopped(tmp_path: Path) -> None:
    code, events = _headless(
        tmp_path, str(TRAINER / "envcheck.py"), "--fail-rank", "3", "--sleep", "60"
    )
    summary = events[-1]
    assert code == 1 and summary["ok"] is False
    ranks = {r["rank"]: r for r in summary["ranks"]}
    assert ranks[3]["state"] == "failed" and ranks[3]["exit_code"] == 1
    assert ranks[3]["traceback"] and ranks[3]["traceback"][0].startswith("Traceback")
    assert "rank 3" in summary["detail"]
    assert [r["rank"] for r in summary["ranks"] if r["culprit"]] == [3]
    assert ranks[3]["cause"] == "exception"
    assert sum(f["root_cause"] for f in summary["failures"]) == 1
    assert all(t["clean"] for t in events if t["event"] == "teardown")
    assert not pids_with_tag(summary["run_id"])


def test_teardown_kills_agents_and_workers(tmp_path: Path) -> None:
    """SIGTERM to headless mid-run: every agent and worker (in their own sessions) ends."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ddptui.cli",
            "run",
            "--headless",
            "--lines",
            str(TRAINER / "envcheck.py"),
            "--sleep",
            "300",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    assert proc.stdout is not None
    running: set[int] = set()
    run_id = ""
    deadline = time.monotonic() + 180
    while len(running) < 4 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        if event["event"] == "notice" and not run_id:
            run_id = event["message"].split()[1].rstrip(":")
        if event["event"] == "rank" and event["state"] == "running":
            running.add(event["rank"])
    assert len(running) == 4
    before = pids_with_tag(run_id)
    assert len(before) >= 6  # 2 agents + 4 workers
    proc.send_signal(signal.SIGTERM)
    out, _ = outputs(proc, 60)
    events = [json.loads(line) for line in out.splitlines()]
    teardown = [e for e in events if e["event"] == "teardown"]
    assert len(teardown) == 2 and all(t["clean"] for t in teardown), teardown
    assert events[-1]["event"] == "summary" and proc.returncode == 1
    assert not pids_with_tag(run_id)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "script not found: missing.py"),
        (["--nodes", "0", "x.py"], "nodes:"),
        (["--backend", "nope", "x.py"], "unknown backend 'nope'"),
        (["--env", "NO-EQ", "x.py"], "malformed --env 'NO-EQ'"),
        (["--backend", "ssh", "--hosts", "node[1-", "x.py"], "bad host list"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and message in proc.stderr
    assert not (tmp_path / "state" / "runs").exists()
