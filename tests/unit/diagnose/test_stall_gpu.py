"""A stall captured on 2 x H100 (NCCL), replayed: rank 1 skipped the 5th all_reduce.

tests/data/stall/gpu_h100x2 holds what `bench/gpu/stall.py` brought back: the node's log,
the node collector's raw report (faulthandler stacks, the flight recorder's entries) and
the raw dumps torch wrote. The console's part is the Monitor's, run here on them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddptui.core.diagnose.flight_recorder import analyse
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.stall_events import FlightRecorderReport, StacksReport, StallReport
from ddptui.core.events import RankChanged
from ddptui.core.node import worker_hook

DATA = Path(__file__).resolve().parents[2] / "data" / "stall" / "gpu_h100x2"
COLLECT = json.loads((DATA / "collect.json").read_text())


def _until_the_skip() -> bytes:
    log = (DATA / "node.log").read_bytes()
    end = log.index(b"skips all_reduce")
    return log[: log.index(b"\n", end) + 1]


def test_the_raw_nccl_dumps_read_without_torch() -> None:
    dumps = worker_hook._flight_recorder(str(DATA))
    nccl = {d["file"]: d for d in dumps if d["file"].startswith("fr_nccl_rank_")}
    assert sorted(nccl) == ["fr_nccl_rank_0", "fr_nccl_rank_1"]
    newest = {d["rank"]: d["entries"][-1] for d in nccl.values()}
    assert newest[0]["profiling_name"] == "nccl:all_reduce"
    assert newest[0]["collective_seq_id"] == newest[1]["collective_seq_id"] + 1
    assert newest[0]["state"] == "scheduled" and newest[1]["state"] == "completed"


def test_flight_recorder_names_rank_1_and_the_all_reduce() -> None:
    gaps = analyse(COLLECT["fr"])
    assert [g.describe() for g in gaps] == [
        "rank 1 never entered collective 5 (nccl:all_reduce [1048576]) of group 0"
    ]


def test_stall_replayed_names_rank_1_the_only_suspect() -> None:
    m = JobWatch(["local0"], 2)
    m.feed("local0", _until_the_skip(), now=100.0)
    assert not [e for e in m.tick(105.0, 10.0) if isinstance(e, StallReport)]
    first = [e for e in m.tick(111.0, 10.0) if isinstance(e, StallReport)]
    assert len(first) == 1 and not first[0].groups  # said at once; the stacks follow
    events = m.stacks_taken({"local0": COLLECT}, now=113.0)
    stacks = next(e for e in events if isinstance(e, StacksReport))
    assert stacks.method == "faulthandler-signal"
    assert stacks.collectives == (
        "rank 1 never entered collective 5 (nccl:all_reduce [1048576]) of group 0",
    )
    assert [(g.ranks, g.suspect) for g in stacks.groups] == [((1,), True), ((0,), False)]
    assert stacks.groups[0].label.startswith("time.sleep(3600) <- sleep_forever (hang.py:")
    assert stacks.groups[1].label.startswith("synchronize <- main (hang.py:")
    stall = next(e for e in events if isinstance(e, StallReport)).to_dict()
    assert stall["suspects"] == [1] and stall["since_s"] == 13.0
    assert stall["groups"][0]["stack"][0].endswith("hang.py:28 in sleep_forever")


def test_dumps_gathered_on_their_own_mark_rank_1_on_the_grid() -> None:
    """A watchdog timeout gathers the dumps alone (no stacks): rank 1 is marked, the others
    are said to wait in all_reduce 5 (NCCL keeps rank 1's all_reduce 4 `completed`)."""
    m = JobWatch(["local0"], 2)
    m.feed("local0", _until_the_skip(), now=100.0)
    dumps_only = {"method": "none", "ranks": [], "fr": COLLECT["fr"]}
    events = m.recorder_taken({"local0": dumps_only}, "watchdog", now=101.0)
    report = events[-1]
    assert isinstance(report, FlightRecorderReport)
    assert report.to_dict() | {"ts": 0} == {
        "event": "flight_recorder",
        "ts": 0,
        "trigger": "watchdog",
        "collectives": ["rank 1 never entered collective 5 (nccl:all_reduce [1048576]) of group 0"],
        "suspects": [1],
        "waiting": [{"ranks": [0], "collective": "collective 5 (nccl:all_reduce) of group 0"}],
        "deadlock": False,
        "dumps": 2,
        "problems": [],
    }
    marked = [e for e in events if isinstance(e, RankChanged)]
    assert [(e.rank, e.suspect) for e in marked] == [(1, True)]
    assert m.summary().recorder == report
