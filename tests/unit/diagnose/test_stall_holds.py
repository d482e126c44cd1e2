"""A stall stays a stall: the chatter its own stacks provoke on NCCL is no progress.

Replays tests/data/stall/gpu_h100x2/console (2 x H100, NCCL, rank 1 skipped the 5th
all_reduce): the node's log after the skip holds only ProcessGroupNCCL's "preparing to dump
debug info" lines, printed by each rank when the collector asked for its flight-recorder
dump. In the captured run they turned both ranks back to running half a second after the
stacks were taken (the stall flapped every hang timeout); replayed here they must not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.stall_events import StallReport
from ddptui.core.events import Event, RankChanged, RankState
from ddptui.core.monitor.chatter import is_chatter, may_hold_chatter

DATA = Path(__file__).resolve().parents[2] / "data" / "stall" / "gpu_h100x2" / "console"
LOG = (DATA / "stall_node.log").read_bytes()
SKIP = LOG.index(b"\n", LOG.index(b"skips all_reduce")) + 1
AFTER = [line for line in LOG[SKIP:].splitlines(keepends=True) if line.startswith(b"[ddptui:")]


def _events(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def test_the_capture_shows_the_flap_the_dump_chatter_caused() -> None:
    """What the console said then: stalled, then running again with no step in between."""
    ranks = [e for e in _events("stall.jsonl") if e["event"] == "rank" and e["rank"] == 0]
    states = [e["state"] for e in ranks]
    assert states[states.index("hung") + 1] == "running"
    assert len(AFTER) == 4 and all(b"preparing to dump debug info" in line for line in AFTER)


def _stalled() -> JobWatch:
    m = JobWatch(["local0"], 2)
    m.feed("local0", LOG[:SKIP], now=100.0)
    m.board.last_progress = 100.0
    first = [e for e in m.tick(121.0, 20.0) if isinstance(e, StallReport)]
    assert len(first) == 1 and first[0].ts == 121.0
    report = json.loads((DATA / "stall_collect.json").read_text())
    m.stacks_taken({"local0": report}, now=122.0)
    return m


def test_the_dump_chatter_keeps_the_stall_for_three_minutes() -> None:
    m = _stalled()
    events: list[Event] = []
    for offset, line in enumerate(AFTER):
        events += m.feed("local0", line, now=122.5 + offset * 0.5)
    for now in range(123, 123 + 180):
        events += m.tick(float(now), 20.0)
    changes = [e for e in events if isinstance(e, RankChanged)]
    assert not [e for e in changes if e.state != RankState.HUNG], changes
    assert not [e for e in changes if e.detail == "progress again"]
    assert not [e for e in events if isinstance(e, StallReport)]  # no second stall, no stacks
    assert m.stall.stalled and m.stall.last is not None and m.stall.last.suspects == (1,)
    assert {c.state for c in m.board.all_cells()} == {RankState.HUNG}


def test_a_step_of_the_rank_ends_the_stall() -> None:
    m = _stalled()
    events = m.feed("local0", b"[ddptui:1:1]:hang rank=1 step=5\n", now=130.0)
    events += m.tick(131.0, 20.0)
    assert not m.stall.stalled
    assert [e.state for e in events if isinstance(e, RankChanged) and e.rank == 1][0] == (
        RankState.RUNNING
    )


@pytest.mark.parametrize(
    "line",
    [
        "[rank0]:[E1126 16:29:14.269803303 ProcessGroupNCCL.cpp:1628] [PG ID 0 PG GUID 0"
        "(default_pg) Rank 0] ProcessGroupNCCL preparing to dump debug info.",
        "[W1126 16:29:14.269 ProcessGroupNCCL.cpp:1300] Warning: ...",
        "W1126 16:28:58.224000 648 torch/distributed/run.py:851] *****",
        "gpu1:6180:6180 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "host-a:12:40 [1] NCCL WARN Call to recv failed",
        "/opt/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py:83: UserWarning:",
        "ddptui: probe",
        "2026-11-29T01:04:19.422 [INFO] [torchft::manager] - [Replica ft_1] Start quorum for "
        "group_rank 0",
        "INFO torchft.checkpointing.http_transport: Started CheckpointServer on http://vm:4/c",
    ],
)
def test_torch_nccl_and_ddptui_lines_are_chatter(line: str) -> None:
    assert may_hold_chatter(line) and is_chatter(line)


@pytest.mark.parametrize(
    "line",
    [
        "hang rank=1 step=5",
        "[RANK 3] Epoch 49 | Batchsize: 32 | Steps: 8",
        "loss 0.25 at step 100 (torch 2.13)",
        "Epoch 1: NCCL all-reduce bandwidth 120 GB/s",
    ],
)
def test_the_users_own_lines_are_progress(line: str) -> None:
    assert not is_chatter(line)
