"""Goodput on real torchrun (local backend, headless): where the wall time went adds up to it,
and the parts a run had are the ones named: a job restarted by torchrun, a stall torn down, a
straggler, quiet checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cases import TRAINER
from tests.procs import outputs, pids_with_tag

pytestmark = pytest.mark.integration

SLOW_RANK_DDP = Path(__file__).resolve().parents[1] / "data" / "straggler" / "slow_rank_ddp.py"
PARTS = ("stepping", "launch", "restart", "stalled", "straggler", "phases", "teardown", "detached")
ONE_NODE = ("--nodes", "1", "--nproc-per-node", "2")


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "DDPTUI_STATE_DIR": str(tmp / "state")}


def _start(tmp: Path, *args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless", *ONE_NODE, *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp, env=_env(tmp))


def _adds_up(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's goodput, checked: its parts add up to its wall time, which is the time
    from the session's first event to its summary (within 1%), and so do its attempts'."""
    summary = events[-1]
    assert summary["event"] == "summary", events[-3:]
    goodput = summary["goodput"]
    parts = goodput["parts"]
    assert set(parts) == set(PARTS) and all(v >= 0 for v in parts.values())
    assert parts["detached"] == 0  # one console followed the run from its launch to its end
    wall = goodput["wall_s"]
    assert abs(sum(parts.values()) - wall) <= 0.01 * wall
    assert abs(wall - (summary["ts"] - events[0]["ts"])) <= 0.01 * wall
    assert goodput["goodput"] == pytest.approx(parts["stepping"] / wall, abs=1e-3)
    attempts = goodput["attempts"]
    assert abs(sum(sum(a["parts"].values()) for a in attempts) - wall) <= 0.01 * wall
    assert attempts[0]["began"] == goodput["began"] and attempts[-1]["ended"] == goodput["ended"]
    for before, after in zip(attempts, attempts[1:], strict=False):
        assert before["ended"] == after["began"]
    # every goodput event on the way adds up too, and they come on news, not every second
    said = [e for e in events if e["event"] == "goodput"]
    assert said
    for event in said:
        split = event["goodput"]
        assert abs(sum(split["parts"].values()) - split["wall_s"]) <= 0.01 * max(
            1.0, split["wall_s"]
        )
    for a, b in zip(said, said[1:], strict=False):
        news = a["current"] != b["current"] or len(a["goodput"]["attempts"]) != len(
            b["goodput"]["attempts"]
        )
        assert news or b["ts"] - a["ts"] >= 5.0, (a, b)
    return goodput


def test_a_restarted_job_has_its_launch_its_steps_its_restart_and_its_end(
    tmp_path: Path,
) -> None:
    proc = _start(
        tmp_path, "--max-restarts", "1", str(TRAINER / "envcheck.py"),
        "--fail-rank", "1", "--fail-after", "3", "--sleep", "30",
    )  # fmt: skip
    out, _ = outputs(proc, 300)
    events = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 1
    goodput = _adds_up(events)
    parts = goodput["parts"]
    for part in ("launch", "stepping", "restart", "teardown"):
        assert parts[part] > 0, (part, parts)
    assert parts["stalled"] == 0 and parts["phases"] == 0
    # two attempts: the first launched and stepped until rank 1 failed; the second waited for
    # its round, stepped until rank 1 failed again (no restart left) and ended
    first, second = goodput["attempts"]
    assert first["parts"]["launch"] > 0 and first["parts"]["stepping"] >= 2.0
    assert first["parts"]["restart"] == 0 and first["parts"]["teardown"] == 0
    assert second["parts"]["launch"] == 0 and second["parts"]["restart"] > 0
    # (its rank 1 fails as before, or a peer before it: gloo's connection to the restarted
    # group is refused at times)
    assert second["parts"]["stepping"] > 0 and second["parts"]["teardown"] > 0
    assert "restart" in [e["current"] for e in events if e["event"] == "goodput"]
    assert not pids_with_tag(events[-1]["run_id"])
    # history keeps it: the split in --json, the stepping share in the table
    listed = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "history", "--json"],
        capture_output=True, text=True, timeout=60, env=_env(tmp_path), check=True,
    )  # fmt: skip
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["goodput"]["parts"] == parts
    table = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "history", "--wide"],
        capture_output=True, text=True, timeout=60, env=_env(tmp_path), check=True,
    ).stdout.splitlines()  # fmt: skip
    column = table[0].index("GOODPUT")
    assert table[1][column:].startswith(f"{goodput['goodput']:.0%}")


def test_a_stall_torn_down_is_stalled_from_the_last_step_to_the_teardown(
    tmp_path: Path,
) -> None:
    timeout = 6
    proc = _start(
        tmp_path, "--hang-timeout", str(timeout), "--stacks-method", "signal",
        str(TRAINER / "hang.py"), "--sleep-rank", "1",
    )  # fmt: skip
    assert proc.stdout is not None
    events = []
    for line in proc.stdout:
        events.append(json.loads(line))
        if events[-1]["event"] == "stall" and events[-1]["groups"]:
            break
    stall = next(e for e in events if e["event"] == "stall")
    said = [e for e in events if e["event"] == "goodput" and e["ts"] >= stall["ts"]]
    assert said and said[0]["current"] == "stalled"  # said at once, as the stall is
    proc.send_signal(signal.SIGINT)
    out, _ = outputs(proc, 120)
    events += [json.loads(line) for line in out.splitlines()]
    goodput = _adds_up(events)
    parts = goodput["parts"]
    for part in ("launch", "stalled", "teardown"):
        assert parts[part] > 0, (part, parts)
    assert parts["restart"] == 0
    # stalled from the ranks' last progress: at least the hang timeout before it was said
    assert parts["stalled"] >= timeout - 0.5
    teardown_asked = next(
        e for e in events if e["event"] == "phase" and e["phase"] == "tearing down"
    )
    began = stall["ts"] - stall["since_s"]
    assert parts["stalled"] == pytest.approx(teardown_asked["ts"] - began, abs=0.5)
    assert len(goodput["attempts"]) == 1
    assert not pids_with_tag(events[-1]["run_id"])


@pytest.mark.timeout(600)
def test_a_straggler_costs_the_share_of_each_step_its_peers_wait(tmp_path: Path) -> None:
    """2 pseudo-nodes x 2 ranks; rank 3 sleeps 1.6 times as long a step as the others."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", str(SLOW_RANK_DDP),
         "--steps", "450", "--slow-rank", "3", "--slow", "1.6"],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=_env(tmp_path),
    )  # fmt: skip
    out, _ = outputs(proc, 540)
    events = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 0, events[-1]
    goodput = _adds_up(events)
    parts = goodput["parts"]
    named = [e for e in events if e["event"] == "straggler" and e["ranks"]]
    assert named and named[0]["ranks"] == [3]
    assert parts["straggler"] > 0 and parts["stepping"] > parts["straggler"]
    # its drag as its score says it: its peers wait what it computes beyond the best rank, a
    # step of about its own compute: about 1 - its relative score of each second it is named
    ends = [e["ts"] for e in events if e["event"] == "straggler" and not e["ranks"]]
    teardown = next(e["ts"] for e in events if e["event"] == "node" and e["state"] == "exited")
    until = min([t for t in ends if t > named[0]["ts"]] or [teardown])
    drag = 1 - named[0]["scores"]["3"]["relative"]
    assert parts["straggler"] == pytest.approx(drag * (until - named[0]["ts"]), rel=0.35)
    assert not pids_with_tag(events[-1]["run_id"])


def test_quiet_checkpoints_are_phases_as_long_as_the_phase_watch_says(tmp_path: Path) -> None:
    """Two 20 s checkpoints (rank 0 writes, printing nothing; the others wait in a barrier)
    under a hang timeout of 10 s: phases, not a stall. (Tighter, the suite's six workers on
    two cores held a 1 s step past a 5.5 s budget once, and the workers' own exit after the
    last step past 6 s: stalls of the load, not of the job.)"""
    proc = _start(
        tmp_path, "--nodes", "2", "--hang-timeout", "10", str(TRAINER / "checkpoint_ddp.py"),
        "--steps", "25", "--every", "10", "--step-s", "1", "--checkpoint-s", "20",
    )  # fmt: skip
    out, _ = outputs(proc, 300)
    events = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 0, events[-3:]
    goodput = _adds_up(events)
    parts = goodput["parts"]
    ended = [e for e in events if e["event"] == "quiet_phase" and e["ended"] is not None]
    assert len(ended) == 2 and not [e for e in events if e["event"] == "stall"]
    took = sum(e["ended"] - e["began"] for e in ended)
    assert parts["phases"] == pytest.approx(took, abs=0.5)
    assert parts["stalled"] == 0 and parts["stepping"] > 0 and parts["launch"] > 0
