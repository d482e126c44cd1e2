"""Stalls over SSH and on Slurm, with real torchrun: the all-stop hang (one rank sleeps, the
others wait in all_reduce) is a stall with that rank the only suspect, its stack showing the
sleep; stacks taken the way that needs no ptrace; the teardown after it clean."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from testbed import SlurmCluster
from testbed.netns import Testbed
from tests.integration.slurmrun import assert_clean_teardown, finish, job_of, start
from tests.integration.sshrun import TRAINER, popen_headless, read_until, sleep_line
from tests.procs import outputs

TIMEOUT = 6
HANG = [str(TRAINER / "hang.py"), "--sleep-rank", "1"]
SLEEP_LINE = sleep_line(TRAINER / "hang.py")
ARGS = ["--hang-timeout", str(TIMEOUT), "--stacks-method", "signal"]


def _stalled(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """Events until the stall with its stacks; a run that never stalls is stopped (and its
    last events shown) rather than waited for."""
    stop = threading.Timer(150, proc.send_signal, [signal.SIGINT])
    stop.start()
    try:
        events = read_until(
            proc, lambda e: e["event"] == "summary" or (e["event"] == "stall" and e["groups"])
        )
    finally:
        stop.cancel()
    shown = [e for e in events if e["event"] not in ("rank",)][-8:]
    assert events and events[-1]["event"] == "stall", shown
    return events


def _assert_the_sleeper_is_the_suspect(events: list[dict[str, Any]]) -> None:
    stall = events[-1]
    assert stall["since_s"] <= TIMEOUT + 10
    assert stall["suspects"] == [1] and stall["method"] == "faulthandler-signal"
    assert stall["groups"][0]["ranks"] == [1]
    assert stall["groups"][0]["stack"][0].endswith(f"hang.py:{SLEEP_LINE} in sleep_forever")
    assert sorted(stall["groups"][1]["ranks"]) == [0, 2, 3]
    stacks = next(e for e in events if e["event"] == "stacks")
    assert not stacks["problems"], stacks["problems"]
    assert {r[1] for r in stacks["ranks"]} == {e["node"] for e in events if e["event"] == "node"}


def _assert_summary(summary: dict[str, Any]) -> None:
    assert summary["stopped_by"] == "operator"
    assert summary["stall"]["suspects"] == [1]
    causes = {r["rank"]: r["cause"] for r in summary["ranks"]}
    assert causes[1] == "stall_suspect"
    assert {causes[r] for r in (0, 2, 3)} == {"waiting_in_collective"}
    assert not any(f["root_cause"] for f in summary["failures"])
    # the teardown of the stalled job gathered the flight recorder's dumps through the nodes
    recorder = summary["flight_recorder"]
    assert recorder["trigger"] == "teardown" and recorder["suspects"] == [1]
    assert recorder["dumps"] == 4 and not recorder["problems"]


def test_ssh_all_stop_hang_is_a_stall_naming_the_sleeping_rank(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    proc = popen_headless(clean_testbed, tmp_path / "state", "--hosts", "node[1-2]", *ARGS, *HANG)
    events = _stalled(proc)
    _assert_the_sleeper_is_the_suspect(events)
    proc.send_signal(signal.SIGINT)
    out, _ = outputs(proc, 180)
    rest = [json.loads(line) for line in out.splitlines()]
    _assert_summary(rest[-1])
    assert all(t["clean"] for t in rest if t["event"] == "teardown")
    for host in ("node1", "node2"):
        assert not [p for p in clean_testbed.describe_pids(host) if "python" in p]


def test_slurm_all_stop_hang_is_a_stall_naming_the_sleeping_rank(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    proc = start(slurm_cluster, tmp_path, *ARGS, *HANG)
    events = _stalled(proc)
    _assert_the_sleeper_is_the_suspect(events)
    result = finish(proc, signal.SIGINT)
    _assert_summary(result.summary)
    assert_clean_teardown(slurm_cluster, result, job_of(events))


def _assert_deadlock(events: list[dict[str, Any]]) -> None:
    """Ranks 0-1 (the first node) wait in the world's all_reduce, 2-3 in a second group's:
    no odd one out, both halves named with the collective each waits in."""
    stall = events[-1]
    assert stall["deadlock"] and stall["suspects"] == [0, 1, 2, 3]
    groups = {tuple(sorted(g["ranks"])): g["collective"] for g in stall["groups"]}
    assert set(groups) == {(0, 1), (2, 3)}
    assert groups[(0, 1)].endswith("(gloo:all_reduce) of group 0")
    assert groups[(2, 3)].endswith("(gloo:all_reduce) of group 1")


def _assert_deadlock_summary(summary: dict[str, Any]) -> None:
    assert summary["stopped_by"] == "operator" and not summary["failures"]
    assert {(r["state"], r["cause"]) for r in summary["ranks"]} == {("stopped", "deadlock")}
    assert "deadlock: ranks 0, 1 in collective" in summary["detail"]


def test_ssh_deadlock_names_both_groups(clean_testbed: Testbed, tmp_path: Path) -> None:
    deadlock = [HANG[0], "--deadlock"]
    proc = popen_headless(
        clean_testbed, tmp_path / "state", "--hosts", "node[1-2]", *ARGS, *deadlock
    )
    _assert_deadlock(_stalled(proc))
    proc.send_signal(signal.SIGINT)
    out, _ = outputs(proc, 180)
    rest = [json.loads(line) for line in out.splitlines()]
    _assert_deadlock_summary(rest[-1])
    assert all(t["clean"] for t in rest if t["event"] == "teardown")


def test_slurm_deadlock_names_both_groups(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    proc = start(slurm_cluster, tmp_path, *ARGS, HANG[0], "--deadlock")
    events = _stalled(proc)
    _assert_deadlock(events)
    result = finish(proc, signal.SIGINT)
    _assert_deadlock_summary(result.summary)
    assert_clean_teardown(slurm_cluster, result, job_of(events))
