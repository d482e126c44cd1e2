"""Stragglers named live by the console's session, with real torchrun (gloo) on pseudo-nodes.

The job is a plain DDP loop (tests/data/straggler/slow_rank_ddp.py) in which chosen ranks
sleep longer a step; its step rates are all equal, as the gradient all-reduce is a barrier.
Nothing in it knows of any detector: the worker hook's sampler writes each rank's collectives,
the node helper's tail forwards them, the session scores them every 2 s and says who is slow
in its headless `straggler` events, the last one in the summary. These tests read only those
events, as an operator's script would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.knobs import BALANCED_S
from tests.procs import pids_with_tag

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "straggler" / "slow_rank_ddp.py"
WITHIN_S = 60.0


def _run(tmp_path: Path, *args: str, timeout: int = 420) -> list[dict[str, Any]]:
    """Run the job headless (2 pseudo-nodes x 2 ranks) to its end: its events."""
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=env,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = events[-1]
    assert summary["event"] == "summary" and summary["ok"], (summary, proc.stderr[-2000:])
    assert not pids_with_tag(summary["run_id"])
    return events


def _first_step_ts(events: list[dict[str, Any]]) -> float:
    """When the job's ranks began to run (the first rank seen running)."""
    return min(e["ts"] for e in events if e["event"] == "rank" and e["state"] == "running")


def _node_of(events: list[dict[str, Any]], rank: int) -> str:
    return next(e["node"] for e in events if e["event"] == "rank" and e["rank"] == rank)


def _stragglers(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "straggler"]


@pytest.mark.timeout(600)
def test_a_rank_30_percent_slower_for_a_while_is_named_then_cleared(tmp_path: Path) -> None:
    """Rank 1 computes about 30% longer a step (0.14 s of sleep and the model's ~0.03 s
    against 0.1 s and the same) for its first 500 steps (over a minute), then as the others."""
    events = _run(
        tmp_path, "--steps", "900", "--slow-rank", "1", "--slow", "1.4", "--slow-until", "500"
    )
    said = _stragglers(events)
    assert said, "no straggler named"
    named = said[0]
    assert named["ranks"] == [1] and named["nodes"] == [], said
    assert named["ts"] - _first_step_ts(events) < WITHIN_S
    node = _node_of(events, 1)
    assert named["evidence"][0].startswith(f"rank 1 ({node}) at 0.")
    assert named["scores"]["1"]["relative"] < 0.8 < named["scores"]["0"]["relative"]
    assert named["method"] == "arrival" and named["threshold"] == 0.8
    assert said[-1]["ranks"] == [] and said[-1]["evidence"] == []  # it recovered
    assert all(e["ranks"] in ([1], []) for e in said)
    summary = events[-1]
    assert summary["straggler"]["ranks"] == []


def test_a_slow_node_is_named_as_a_node(tmp_path: Path) -> None:
    events = _run(
        tmp_path, "--steps", "450", "--slow-rank", "2", "--slow-rank", "3", "--slow", "1.4"
    )
    said = _stragglers(events)
    assert said and said[0]["ts"] - _first_step_ts(events) < WITHIN_S
    node = _node_of(events, 2)
    assert node == _node_of(events, 3) != _node_of(events, 0)
    last = events[-1]["straggler"]
    assert sorted(last["ranks"]) == [2, 3] and last["nodes"] == [node]
    assert last["evidence"][0].startswith(f"node {node}: all 2 ranks slow")


@pytest.mark.timeout(900)
def test_a_balanced_job_of_three_minutes_names_nobody(tmp_path: Path) -> None:
    # steps of at least 0.1 s of sleep each (1,850 by default): over BALANCED_S (3 minutes)
    # however fast the machine
    steps = int(BALANCED_S * 10) + 50
    events = _run(tmp_path, "--steps", str(steps), timeout=BALANCED_S + 420)
    running = [e["ts"] for e in events if e["event"] == "rank" and e["state"] == "running"]
    summary = events[-1]
    assert summary["ts"] - min(running) >= BALANCED_S, f"the job ran for less than {BALANCED_S} s"
    assert _stragglers(events) == [] and summary["straggler"] is None
    debug = Path(summary["run_dir"]) / "nodes"
    lines = sum(
        len(path.read_text().splitlines()) for path in debug.glob("*.debug/collectives/*.jsonl")
    )
    # 4 ranks, a line every 6 s or so each: 120 over the default 180 s
    assert lines >= 4 * BALANCED_S / 6, (
        "the ranks' collectives were not sampled: nothing was scored"
    )
