"""`--notify CMD` on real torchrun jobs run headless: a crash is told once, with the incident,
the run and how to look at it; a command that fails is one warning and changes nothing else;
a hang is told once however often the stall is said again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.procs import outputs, pids_with_tag

ROOT = Path(__file__).resolve().parents[2]
ENVCHECK = str(ROOT / "trainer" / "envcheck.py")
HANG = str(ROOT / "trainer" / "hang.py")


def _start(tmp_path: Path, notify: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--notify", notify, *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)


def _events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def _told(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _notices(events: list[dict[str, Any]], level: str) -> list[str]:
    return [e["message"] for e in events if e["event"] == "notice" and e["level"] == level]


def test_a_crash_is_told_once_with_the_incident_the_run_and_how_to_look(tmp_path: Path) -> None:
    told_file = tmp_path / "told.jsonl"
    proc = _start(tmp_path, f"cat >> {told_file}", ENVCHECK, "--fail-rank", "1")
    out, _ = outputs(proc, 240)
    events = _events(out)
    summary = events[-1]
    assert summary["event"] == "summary" and proc.returncode == 1
    assert not summary["ok"] and summary["stopped_by"] == "failure"
    (told,) = _told(told_file)
    assert told["notify"] == "ended"
    assert told["run_id"] == summary["run_id"] and told["run_dir"] == summary["run_dir"]
    assert Path(told["run_dir"], "events.jsonl").is_file()
    incident = told["incident"]
    assert incident["kind"] == "crash" and incident["blamed"] == [1]
    assert incident["nodes"] == [r["node"] for r in summary["ranks"] if r["rank"] == 1]
    assert "deliberate failure on rank 1" in incident["summary"]
    assert told["headline"] == incident["headline"] == summary["headline"]
    assert told["run"]["ok"] is False and told["run"]["stopped_by"] == "failure"
    run_id = summary["run_id"]
    assert told["look"] == {
        "console": f"ddptui attach {run_id}",
        "browser": f"ddptui serve {run_id}",
    }
    # said in the run, before its summary, and kept in the run's events
    told_notice = f"notify: ended (incident {incident['number']}) told"
    assert _notices(events, "info")[-1] == told_notice and not _notices(events, "warning")
    recorded = Path(summary["run_dir"], "events.jsonl").read_text()
    assert told_notice in recorded
    assert not pids_with_tag(run_id)


def test_a_failing_command_is_one_warning_and_the_run_ends_as_it_would_have(
    tmp_path: Path,
) -> None:
    told_file = tmp_path / "told.jsonl"
    notify = f"cat >> {told_file}; echo 'pager unreachable' >&2; exit 1"
    proc = _start(tmp_path, notify, ENVCHECK, "--fail-rank", "1")
    out, _ = outputs(proc, 240)
    events = _events(out)
    summary = events[-1]
    assert len(_told(told_file)) == 1  # it ran, once
    (warning,) = _notices(events, "warning")
    assert warning.startswith("notify: ended (incident ")
    assert warning.endswith("not told: the command exited 1: pager unreachable")
    assert not [m for m in _notices(events, "info") if m.startswith("notify:")]
    # the run's own end is untouched: the crash, its culprit, the exit status, a clean teardown
    assert summary["event"] == "summary" and proc.returncode == 1
    assert not summary["ok"] and summary["stopped_by"] == "failure"
    assert summary["headline"].startswith("crash: rank 1 on ")
    assert [r["rank"] for r in summary["ranks"] if r["culprit"]] == [1]
    assert all(t["clean"] for t in events if t["event"] == "teardown")
    assert not pids_with_tag(summary["run_id"])


def test_a_hang_is_told_once_though_the_stall_is_said_again(tmp_path: Path) -> None:
    told_file = tmp_path / "told.jsonl"
    proc = _start(
        tmp_path,
        f"cat >> {told_file}",
        "--hang-timeout", "6", "--stacks-method", "signal", HANG, "--sleep-rank", "1",
    )  # fmt: skip
    assert proc.stdout is not None
    events: list[dict[str, Any]] = []
    for line in proc.stdout:  # until the stall is said again, with its stacks
        events.append(json.loads(line))
        if events[-1]["event"] == "stall" and events[-1]["groups"]:
            break
    deadline = time.monotonic() + 60
    while not _told(told_file) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # room for a second alert, were there one
    proc.send_signal(signal.SIGINT)
    out, _ = outputs(proc, 120)
    events += _events(out)
    stalls = [e for e in events if e["event"] == "stall"]
    assert len(stalls) >= 2, stalls
    hang_reports = [e for e in events if e["event"] == "incident" and e["kind"] == "hang"]
    assert len(hang_reports) >= 2  # the story updated it: blamed, judged, over
    (told,) = _told(told_file)
    assert told["notify"] == "hang" and told["incident"]["kind"] == "hang"
    assert told["incident"]["number"] == hang_reports[0]["number"]
    assert told["run_id"] == events[-1]["run_id"]
    assert (
        _notices(events, "info").count(f"notify: hang (incident {told['incident']['number']}) told")
        == 1
    )
    # the operator's teardown is no bad end: nothing more is told
    summary = events[-1]
    assert summary["event"] == "summary" and summary["stopped_by"] == "operator"
    assert not pids_with_tag(summary["run_id"])


FAIL_FAST = 'import os, sys\nos.write(1, b"fail_fast: exits at once\\n")\nsys.exit(1)\n'


def test_a_restart_storm_is_told_once_and_the_end_by_itself(tmp_path: Path) -> None:
    """Every worker exits 1 at once (no process group, so no rendezvous of gloo's to go
    wrong): torchrun restarts the group three times within seconds, then gives up."""
    (tmp_path / "fail_fast.py").write_text(FAIL_FAST)
    told_file = tmp_path / "told.jsonl"
    proc = _start(
        tmp_path, f"cat >> {told_file}", "--nodes", "1", "--max-restarts", "3", "fail_fast.py"
    )
    out, _ = outputs(proc, 180)
    events = _events(out)
    summary = events[-1]
    assert summary["event"] == "summary" and proc.returncode == 1
    restarts = [e for e in events if e["event"] == "incident" and e["kind"] == "restarted"]
    assert sorted({e["number"] for e in restarts}) == [1, 2, 3], restarts
    storm, ended = _told(told_file)
    assert storm["notify"] == "restart_storm" and storm["restarts"] == 3
    assert storm["incident"]["kind"] == "restarted" and storm["incident"]["number"] == 3
    assert "restart 3 of 3" in storm["headline"]
    assert ended["notify"] == "ended" and ended["incident"]["kind"] == "crash"
    assert ended["headline"] == summary["headline"]
    told = [m for m in _notices(events, "info") if m.startswith("notify:")]
    assert told == ["notify: restart_storm (incident 3) told", "notify: ended (incident 4) told"]
    assert not pids_with_tag(summary["run_id"])


def _summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in reversed(events) if e["event"] == "summary")


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    return not Path(f"/proc/{pid}").exists()


def _watcher(events: list[dict[str, Any]]) -> int:
    (said,) = [m for m in _notices(events, "info") if "keeps watch on run" in m]
    return int(said.split()[1])


def test_a_detached_run_is_watched_and_its_crash_told(tmp_path: Path) -> None:
    """Launched and left at once (`--detach`): nobody follows the run but the watcher the
    console left behind, which tells of the crash once, records the outcome and goes."""
    told_file = tmp_path / "told.jsonl"
    proc = _start(
        tmp_path, f"cat >> {told_file}", "--detach",
        ENVCHECK, "--fail-rank", "1", "--fail-after", "15", "--sleep", "60",
    )  # fmt: skip
    out, _ = outputs(proc, 240)
    events = _events(out)
    summary = _summary(events)
    assert proc.returncode == 0 and summary["detached"], summary["detail"]
    assert summary["detail"].endswith("a watcher follows it meanwhile to notify")
    run_id, run_dir = summary["run_id"], Path(summary["run_dir"])
    watcher = _watcher(events)
    assert _gone(watcher, 240), "the watcher follows the run to its end, then goes"
    (told,) = _told(told_file)
    assert told["notify"] == "ended" and told["run_id"] == run_id
    assert told["incident"]["kind"] == "crash" and told["incident"]["blamed"] == [1]
    watched = _events((run_dir / "watcher.jsonl").read_text())
    end = watched[-1]
    assert end["event"] == "summary" and not end["ok"] and not end["detached"]
    assert end["headline"].startswith("crash: rank 1 on ")
    assert not (run_dir / "watcher").exists()
    history = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "history", "--json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip
    (row,) = [r for r in _events(history.stdout) if r["id"] == run_id]
    assert row["status"] == "failed", row
    assert not pids_with_tag(run_id)


def test_a_console_that_attaches_takes_over_from_the_watcher(tmp_path: Path) -> None:
    told_file = tmp_path / "told.jsonl"
    proc = _start(tmp_path, f"cat >> {told_file}", "--detach", ENVCHECK, "--sleep", "30")
    out, _ = outputs(proc, 240)
    first = _events(out)
    detached = _summary(first)
    run_id = detached["run_id"]
    watcher = _watcher(first)
    deadline = time.monotonic() + 60  # the watcher follows the run
    while not (Path(detached["run_dir"]) / "watcher").exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    attach = subprocess.Popen(
        [sys.executable, "-m", "ddptui.cli", "attach", run_id, "--headless"],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip
    out, _ = outputs(attach, 240)
    events = _events(out)
    assert f"the run's watcher (PID {watcher}) gave way" in _notices(events, "info")
    assert not Path(f"/proc/{watcher}").exists()
    summary = events[-1]
    assert summary["event"] == "summary" and summary["ok"] and attach.returncode == 0
    # one account from the launch: the watcher's stretch carried on, nothing lost between
    goodput = summary["goodput"]
    assert goodput["began"] <= detached["goodput"]["began"] + 1e-6
    assert abs(sum(goodput["parts"].values()) - goodput["wall_s"]) < 0.01 * goodput["wall_s"]
    assert not [m for m in _notices(events, "info") if "keeps watch" in m]  # it did not detach
    assert not _told(told_file)  # a clean run tells nobody
    assert not pids_with_tag(run_id)
