"""The story's first line on 2 GPUs: what the console said of an NCCL job on real GPUs, its
node output and collectives replayed through today's code (JobWatch, the story) into the
console at 80x24. Two captures: rank 1 skips an all_reduce (2 x H100, tests/data/stall/
gpu_h100x2) and rank 1 passes twice the size (2 x H200, tests/data/gpu/h200x2_mismatch).

For each: the story's lead names the kind and rank 1, the root-cause panel's first row says
it, the grid marks rank 1 and no other, and one incident per cause; and the console that ran
on the GPUs said the same rank in its own events then (the capture)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import Event, NodeChanged, NodeState
from ddptui.core.story.incident import IncidentKind, IncidentReport
from ddptui.core.story.story import Story

from .conftest import local_spec
from .replay import first_rows_and_marks
from .stall_replay import T0

DATA = Path(__file__).resolve().parents[1] / "data"
SMALL = (80, 24)


def _skipped_on_h100x2() -> list[Event]:
    """hang.py --skip-rank 1 on 2 x H100: the lines to the skip, the stall, its stacks and
    the flight recorder's dumps, as the session would hand them over."""
    where = DATA / "stall" / "gpu_h100x2"
    m = JobWatch(["local0"], 2)
    events: list[Event] = [*m.initial_events(), NodeChanged("local0", NodeState.RUNNING)]
    log = (where / "node.log").read_bytes()
    end = log.index(b"\n", log.index(b"skips all_reduce")) + 1
    events += m.feed("local0", log[:end], now=T0)
    events += m.tick(T0 + 11, 10.0)
    events += m.stacks_taken({"local0": json.loads((where / "collect.json").read_text())}, T0 + 13)
    return Story(lambda: T0 + 14).retell(events)


def _mismatch_on_h200x2() -> list[Event]:
    """mismatch.py on 2 x H200: the node's lines, then both ranks' collectives rows in the
    order they were written (rank 1's odd all_reduce an in-flight row: NCCL hangs in it)."""
    where = DATA / "gpu" / "h200x2_mismatch"
    m = JobWatch(["local0"], 2)
    events: list[Event] = [*m.initial_events(), NodeChanged("local0", NodeState.RUNNING)]
    log = (where / "node.log").read_bytes()
    events += m.feed("local0", log[: log.index(b"\n", log.index(b"step=5")) + 1], now=T0)
    rows = [
        json.loads(line)
        for name in ("rank_0.jsonl", "rank_1.jsonl")
        for line in (where / name).read_text().splitlines()
    ]
    for i, row in enumerate(sorted(rows, key=lambda d: d["wall_ns"])):
        events += m.collectives("local0", row, now=T0 + 1 + i)
    return Story(lambda: T0 + 30).retell(events)


def _captured(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _lead(events: list[Event]) -> tuple[IncidentKind, tuple[int, ...], int]:
    """The story's lead as the last incident report named it: its kind, the ranks it
    blames, and how many incidents of its kind were told."""
    reports = [e for e in events if isinstance(e, IncidentReport)]
    incidents = {r.incident.number: r.incident for r in reports}
    lead = incidents[reports[-1].lead]
    return lead.kind, lead.blamed, sum(i.kind == lead.kind for i in incidents.values())


async def test_a_skipped_all_reduce_on_two_gpus_reads_the_same_on_every_surface() -> None:
    events = _skipped_on_h100x2()
    kind, blamed, count = _lead(events)
    assert (kind, blamed, count) == (IncidentKind.HANG, (1,), 1)
    rows, marked = await first_rows_and_marks(events, local_spec(nodes=1, nproc_per_node=2))
    assert rows[0].startswith("▶ hang: rank 1 on local0"), rows[:3]
    assert marked == [("local0", 1)]
    # the console on the GPUs said rank 1 then
    said = _captured(DATA / "stall" / "gpu_h100x2" / "console" / "stall.jsonl")
    assert [e["suspects"] for e in said if e["event"] == "stall"][-1] == [1]


async def test_a_size_mismatch_on_two_gpus_reads_the_same_on_every_surface() -> None:
    events = _mismatch_on_h200x2()
    kind, blamed, count = _lead(events)
    assert (kind, blamed, count) == (IncidentKind.COLLECTIVE_MISMATCH, (1,), 1)
    rows, marked = await first_rows_and_marks(events, local_spec(nodes=1, nproc_per_node=2))
    assert rows[0].startswith("▶ collective mismatch: rank 1 on local0"), rows[:3]
    assert marked == [("local0", 1)]
    said = _captured(DATA / "gpu" / "h200x2_mismatch" / "console.jsonl")
    verdicts = [e for e in said if e["event"] == "verdict"]
    assert verdicts and {v["rank"] for v in verdicts} == {1}
