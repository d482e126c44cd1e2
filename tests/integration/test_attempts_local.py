"""Attempts on real torchrun (local backend): a restart round is an attempt of the same run,
a relaunch (`ddptui run --again`) another, and two runs of their own stay two rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cases import TRAINER
from tests.procs import pids_with_tag

pytestmark = pytest.mark.integration


def _ddptui(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddptui.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp / "state")},
    )


def _events(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _history(tmp: Path) -> tuple[list[dict[str, Any]], str]:
    listed = _ddptui(tmp, "history", "--json")
    text = _ddptui(tmp, "history", "--wide")
    assert listed.returncode == 0 and text.returncode == 0, listed.stderr + text.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()], text.stdout


def test_a_torchrun_restart_is_an_attempt_and_two_runs_stay_two_rows(tmp_path: Path) -> None:
    envcheck = str(TRAINER / "envcheck.py")
    failing = _ddptui(
        tmp_path,
        *("run", "--headless", "--nodes", "1", "--nproc-per-node", "2", "--max-restarts", "1"),
        *(envcheck, "--fail-rank", "1"),
    )
    events = _events(failing)
    summary = events[-1]
    assert failing.returncode == 1 and summary["event"] == "summary", failing.stderr[-2000:]
    assert not pids_with_tag(summary["run_id"])
    # torchrun ran the group twice (its one restart used); the second round is attempt 2
    (began,) = [e for e in events if e["event"] == "attempt"]
    assert began["attempt"]["index"] == 2 and began["attempt"]["cause"] == "restart"
    assert began["previous"]["outcome"] == "restarted"
    # why: the round's cause as the restart story has it (the rank whose failure torchrun
    # saw first: rank 1, or its peer failing on the closed connection)
    assert began["attempt"]["why"] == began["previous"]["detail"]
    assert " on local0 failed (exit 1)" in began["attempt"]["why"], began

    ok = _ddptui(tmp_path, "run", "--headless", "--nodes", "1", "--nproc-per-node", "2", envcheck)
    other = _events(ok)[-1]
    assert ok.returncode == 0 and other["ok"] is True
    assert not [e for e in _events(ok) if e["event"] == "attempt"]

    rows, text = _history(tmp_path)
    assert [r["id"] for r in rows] == [other["run_id"], summary["run_id"]]  # two runs, two rows
    assert [len(r["attempts"]) for r in rows] == [1, 2]
    first, second = rows[1]["attempts"]
    assert (first["cause"], first["outcome"]) == ("launch", "restarted")
    assert (second["cause"], second["outcome"]) == ("restart", "failed")
    assert first["started"] < first["ended"] == second["started"] < second["ended"]
    assert rows[1]["status"] == "failed"
    assert f"{summary['run_id']}: 2 attempts" in text
    assert "  #2 restart  " in text

    # the operator runs the failed job again: a third attempt of the same run, one row still
    again = _ddptui(tmp_path, "run", "--headless", "--again", summary["run_id"])
    third = _events(again)[-1]
    assert third["event"] == "summary" and third["run_id"] != summary["run_id"]
    assert not pids_with_tag(third["run_id"])
    # it fails as before, and torchrun restarts it as before: the run's fourth attempt
    (restarted,) = [e for e in _events(again) if e["event"] == "attempt"]
    assert (restarted["attempt"]["index"], restarted["attempt"]["cause"]) == (4, "restart")
    rows, text = _history(tmp_path)
    assert [r["id"] for r in rows] == [summary["run_id"], other["run_id"]]  # its latest first
    causes = [a["cause"] for a in rows[0]["attempts"]]
    assert causes == ["launch", "restart", "relaunch", "restart"], causes
    assert [a["run_id"] for a in rows[0]["attempts"]][1:] == [
        summary["run_id"],
        third["run_id"],
        third["run_id"],
    ]
    assert rows[0]["attempts"][2]["outcome"] == "restarted"
    assert rows[0]["run_dir"] == third["run_dir"] and rows[0]["status"] == "failed"
    assert f"{summary['run_id']}: 4 attempts" in text
    assert f"  #3 relaunch (relaunch of run {summary['run_id']})" in text
