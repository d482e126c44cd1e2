"""Stalls on the local backend, with real torchrun: the all-stop hang, a deadlock, a crash.

Stacks are taken the way that needs no ptrace (`--stacks-method signal`), the way that runs
wherever ptrace is refused; this machine has no Yama to refuse it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.sshrun import sleep_line
from tests.procs import outputs, pids_with_tag

ROOT = Path(__file__).resolve().parents[2]
HANG = str(ROOT / "trainer" / "hang.py")
SLEEP_LINE = sleep_line(Path(HANG))
TIMEOUT = 6


def _start(tmp_path: Path, *args: str, hang_timeout: float = TIMEOUT) -> subprocess.Popen[str]:
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless"]
    argv += ["--hang-timeout", str(hang_timeout), "--stacks-method", "signal", *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)


def _until_stacks(proc: subprocess.Popen[str]) -> list[dict]:
    """Events until the stall said with its stacks (or the run ended)."""
    assert proc.stdout is not None
    events = []
    for line in proc.stdout:
        event = json.loads(line)
        events.append(event)
        if event["event"] == "stall" and event["groups"]:
            break
    return events


def _stop(proc: subprocess.Popen[str]) -> list[dict]:
    proc.send_signal(signal.SIGINT)
    out, _ = outputs(proc, 120)
    return [json.loads(line) for line in out.splitlines()]


def test_all_stop_hang_is_a_stall_with_the_sleeping_rank_the_only_suspect(
    tmp_path: Path,
) -> None:
    proc = _start(tmp_path, HANG, "--sleep-rank", "1")
    events = _until_stacks(proc)
    stalls = [e for e in events if e["event"] == "stall"]
    assert stalls, events[-3:]
    first = stalls[0]
    assert {"event", "since_s", "suspects", "groups", "method"} <= set(first)
    stall = stalls[-1]
    assert stall["since_s"] <= TIMEOUT + 10
    assert stall["suspects"] == [1] and stall["method"] == "faulthandler-signal"
    assert stall["groups"][0]["ranks"] == [1]
    assert stall["groups"][0]["stack"][0].endswith(f"hang.py:{SLEEP_LINE} in sleep_forever")
    assert sorted(stall["groups"][1]["ranks"]) == [0, 2, 3]
    stacks = next(e for e in events if e["event"] == "stacks")
    assert stacks["pyspy"] == ["not asked (stacks method signal)"]
    assert stacks["groups"][0]["label"].startswith("time.sleep(3600) <- sleep_forever")
    assert any("rank 1 never entered collective" in c for c in stacks["collectives"])
    amber = {e["rank"] for e in events if e["event"] == "rank" and e["state"] == "hung"}
    assert amber == {0, 1, 2, 3}
    # `ddptui stacks RUN_ID` on the live run says the same
    run_id = next(e for e in events if e["event"] == "plan")["run_id"]
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}
    cli = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "stacks", run_id, "--method", "signal"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.splitlines()
    assert lines[0] == f"run {run_id}: stacks by faulthandler-signal"
    assert lines[1].startswith("suspect    1 rank: time.sleep(3600) <- sleep_forever")
    assert re.search(r"== rank 1 \(local[01] local rank 1\)\n", cli.stdout), cli.stdout
    # the operator's teardown: no failure story, the suspect stays named
    rest = _stop(proc)
    summary = rest[-1]
    assert summary["stopped_by"] == "operator" and "suspects: 1" in summary["detail"]
    assert summary["stall"]["suspects"] == [1]
    causes = {r["rank"]: r["cause"] for r in summary["ranks"]}
    assert causes == {
        0: "waiting_in_collective",
        1: "stall_suspect",
        2: "waiting_in_collective",
        3: "waiting_in_collective",
    }
    assert not [
        r for r in summary["ranks"] if any(d["kind"] == "peer_lost" for d in r["diagnoses"])
    ]
    assert not summary["failures"]
    # stopped by the teardown, not failed: ranks and nodes alike
    assert {r["state"] for r in summary["ranks"]} == {"stopped"}
    assert not [e for e in rest if e["event"] in ("rank", "node") and e["state"] == "failed"]
    assert [r["rank"] for r in summary["ranks"] if r["culprit"]] == [1]
    # the teardown of the stalled job gathered the flight recorder's dumps once more
    assert summary["flight_recorder"]["trigger"] == "teardown"
    assert summary["flight_recorder"]["suspects"] == [1]
    assert all(t["clean"] for t in rest if t["event"] == "teardown")
    assert not pids_with_tag(summary["run_id"])


def test_deadlock_two_groups_wait_in_different_collectives(tmp_path: Path) -> None:
    proc = _start(tmp_path, HANG, "--deadlock")
    events = _until_stacks(proc)
    stall = [e for e in events if e["event"] == "stall"][-1]
    groups = {tuple(sorted(g["ranks"])): g for g in stall["groups"]}
    assert set(groups) == {(0, 1), (2, 3)}
    lower, upper = groups[(0, 1)]["stack"], groups[(2, 3)]["stack"]
    assert lower != upper
    assert all(any(" in all_reduce" in f for f in stack) for stack in (lower, upper))
    # no odd one out: both halves are named, each with the collective it waits in
    assert stall["deadlock"] and stall["suspects"] == [0, 1, 2, 3]
    assert groups[(0, 1)]["collective"].endswith("(gloo:all_reduce) of group 0")
    assert groups[(2, 3)]["collective"].endswith("(gloo:all_reduce) of group 1")
    rest = _stop(proc)
    summary = rest[-1]
    assert "deadlock: ranks 0, 1 in collective" in summary["detail"]
    assert {r["cause"] for r in summary["ranks"]} == {"deadlock"}
    assert all(t["clean"] for t in rest if t["event"] == "teardown")
    assert not pids_with_tag(rest[-1]["run_id"])


def test_crash_victims_are_classified_and_the_culprit_first(tmp_path: Path) -> None:
    proc = _start(
        tmp_path, str(ROOT / "trainer" / "envcheck.py"), "--fail-rank", "3", "--sleep", "60"
    )
    out, _ = outputs(proc, 240)
    events = [json.loads(line) for line in out.splitlines()]
    summary = events[-1]
    causes = {r["rank"]: r["cause"] for r in summary["ranks"]}
    assert causes[3] == "exception"
    assert all(
        c in ("stopped_by_launcher", "peer_closed", "stopped_by_teardown", "agent_exited")
        for r, c in causes.items()
        if r != 3
    ), causes
    assert [r["rank"] for r in summary["ranks"] if r["culprit"]] == [3]
    failures = summary["failures"]
    assert failures[0]["rank"] == 3 and failures[0]["root_cause"]
    assert not any(f["root_cause"] for f in failures[1:])
    assert all(t["clean"] for t in events if t["event"] == "teardown")
    assert not pids_with_tag(summary["run_id"])


def test_py_spy_where_it_may_attach_gives_the_same_story(tmp_path: Path) -> None:
    """As root (ptrace allowed) `--stacks-method py-spy` reads the stacks from outside."""
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless"]
    argv += ["--hang-timeout", str(TIMEOUT), "--stacks-method", "py-spy", HANG, "--sleep-rank", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    events = _until_stacks(proc)
    stall = [e for e in events if e["event"] == "stall"][-1]
    assert stall["method"] == "py-spy" and stall["suspects"] == [1]
    assert next(e for e in events if e["event"] == "stacks")["pyspy"] == ["used"]
    assert stall["groups"][0]["stack"][0].endswith(f"hang.py:{SLEEP_LINE} in sleep_forever")
    rest = _stop(proc)
    assert all(t["clean"] for t in rest if t["event"] == "teardown")


def test_watchdog_timeout_gathers_the_flight_recorder_and_so_does_the_teardown(
    tmp_path: Path,
) -> None:
    """No stall detection (0): the collectives' own timeout is what gathers the dumps."""
    proc = _start(
        tmp_path, HANG, "--skip-rank", "1", "--pg-timeout", "8", "--linger", hang_timeout=0
    )
    assert proc.stdout is not None
    events = []
    for line in proc.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] in ("flight_recorder", "summary"):
            break
    recorder = events[-1]
    assert recorder["event"] == "flight_recorder", events[-3:]
    assert recorder["trigger"] == "watchdog" and recorder["suspects"] == [1]
    assert recorder["collectives"][0].startswith("rank 1 never entered collective 3 (gloo:")
    assert recorder["waiting"] == [
        {"ranks": [0, 2, 3], "collective": "collective 3 (gloo:all_reduce) of group 0"}
    ]
    assert recorder["dumps"] == 4 and not recorder["problems"]
    assert not [e for e in events if e["event"] in ("stall", "stacks")]
    # the grid marks the rank that never entered it
    marked = [e for e in events if e["event"] == "rank" and e["suspect"]]
    assert {e["rank"] for e in marked} == {1}
    assert "flight recorder: rank 1 never entered" in marked[-1]["detail"]
    # each waiting rank's own timeout said (one may fire seconds after another on a loaded
    # machine; a rank torn down before its timeout fired is the teardown's, rightly)
    timed_out = {e["rank"] for e in events if e["event"] == "rank" and "Timed out" in e["detail"]}
    for line in proc.stdout if timed_out != {0, 2, 3} else ():
        event = json.loads(line)
        if event["event"] == "rank" and "Timed out" in event["detail"]:
            timed_out.add(event["rank"])
            if timed_out == {0, 2, 3}:
                break
    assert timed_out == {0, 2, 3}
    rest = _stop(proc)
    again = [e for e in rest if e["event"] == "flight_recorder"]
    assert [e["trigger"] for e in again] == ["teardown"] and again[0]["suspects"] == [1]
    summary = rest[-1]
    assert summary["flight_recorder"]["trigger"] == "teardown"
    assert "flight recorder: rank 1 never entered collective 3" in summary["detail"]
    causes = {r["rank"]: r["cause"] for r in summary["ranks"]}
    assert {causes[r] for r in (0, 2, 3)} == {"watchdog_timeout"}, causes  # not "teardown"
    assert all(t["clean"] for t in rest if t["event"] == "teardown")
    assert not pids_with_tag(summary["run_id"])
