"""Quiet phases on the local backend, with real torchrun: checkpoints that print nothing for
longer than `--hang-timeout` are phases of the job's rhythm, not stalls; a hang in the step
loop is still named within its step budget.

`DDPTUI_TEST_CHECKPOINT_S` shortens the checkpoints (150 s by default); the hang timeout stays
0.4 of them (60 s against 150 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.knobs import CHECKPOINT_S
from tests.procs import outputs

ROOT = Path(__file__).resolve().parents[2]
TRAINER = str(ROOT / "trainer" / "checkpoint_ddp.py")
HANG_TIMEOUT = round(CHECKPOINT_S * 0.4, 1)
TICK_S = 3.0  # the console checks silences once a second; the stall's event may trail it


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless"]
    argv += ["--hang-timeout", str(HANG_TIMEOUT), "--stacks-method", "signal", TRAINER]
    argv += ["--checkpoint-s", str(CHECKPOINT_S), "--every", "10", *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)


def _kinds(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


@pytest.mark.timeout(3 * CHECKPOINT_S + 360)
def test_checkpoints_longer_than_the_hang_timeout_are_phases_not_stalls(tmp_path: Path) -> None:
    proc = _start(tmp_path, "--steps", "25")
    out, _ = outputs(proc, 3 * CHECKPOINT_S + 300)
    events = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 0, events[-3:]
    assert not _kinds(events, "stall")
    assert not [e for e in _kinds(events, "rank") if e["state"] == "hung"]
    phases = _kinds(events, "quiet_phase")
    begun = [p for p in phases if p["ended"] is None]
    ended = [p for p in phases if p["ended"] is not None]
    assert len(begun) == 2 and len(ended) == 2, phases
    for phase in phases:
        assert phase["label"] == "checkpoint" and phase["ranks"] == [0, 1, 2, 3]
        assert "saving checkpoint ckpt-" in phase["cue"]
    lengths = [p["ended"] - p["began"] for p in ended]
    assert all(CHECKPOINT_S <= n < CHECKPOINT_S + 10 for n in lengths), lengths
    # the first by its name (5 floors), the second by the first's length (x 1.5)
    assert begun[0]["budget_s"] == 5 * HANG_TIMEOUT
    assert abs(begun[1]["budget_s"] - 1.5 * lengths[0]) < 0.01
    budgets = _kinds(events, "step_budgets")
    assert budgets and budgets[-1]["floor_s"] == HANG_TIMEOUT
    assert {b["rank"] for b in budgets[-1]["ranks"]} == {0, 1, 2, 3}
    summary = events[-1]
    assert summary["event"] == "summary" and summary["ok"] and summary["stall"] is None


@pytest.mark.timeout(2 * CHECKPOINT_S + 360)
def test_a_hang_in_the_step_loop_after_a_checkpoint_is_named_within_its_step_budget(
    tmp_path: Path,
) -> None:
    proc = _start(tmp_path, "--steps", "25", "--hang-at-step", "15")
    assert proc.stdout is not None
    events = []
    for line in proc.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] == "stall":
            break
    proc.send_signal(signal.SIGINT)
    out, _ = outputs(proc, 120)
    events += [json.loads(line) for line in out.splitlines()]
    stall = _kinds(events, "stall")[0]
    phases = _kinds(events, "quiet_phase")
    assert len(phases) == 2 and phases[1]["ended"] is not None  # the checkpoint, over
    checkpoint_budget = phases[0]["budget_s"]
    steps = _kinds(events, "step_budgets")[-1]
    step_budget = max(b["budget_s"] for b in steps["ranks"])
    # the step loop's budget, not the checkpoint's: named within it
    assert stall["budget_s"] == step_budget == max(HANG_TIMEOUT, step_budget)
    assert stall["budget_s"] < checkpoint_budget
    assert stall["budget_s"] < stall["since_s"] <= stall["budget_s"] + TICK_S
    assert _kinds(events, "summary")[-1]["stall"] is not None
