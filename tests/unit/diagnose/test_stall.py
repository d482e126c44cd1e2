"""Stalls: detection with no rank progressing, stacks folded into groups, the suspect named,
the flight recorder's gaps, and the teardown of a stalled job told as what it is."""

from __future__ import annotations

import json
from pathlib import Path

from ddptui.core.diagnose.flight_recorder import analyse
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.stacks import (
    group_stacks,
    is_deadlock,
    parse_stacks,
    ranks_from_report,
    suspects,
)
from ddptui.core.diagnose.stall_events import StacksReport, StallReport
from ddptui.core.events import RankState
from ddptui.core.monitor import causes
from ddptui.core.monitor.agent_log import Assigned

DATA = Path(__file__).resolve().parents[2] / "data" / "stall"
# trainer/hang.py --skip-rank 1 on 2 local ranks (gloo): the node collector's raw report
GLOO_SKIP = json.loads((DATA / "gloo_skip_collect.json").read_text())

FAULTHANDLER = """\
Thread 0x00007fa33dbdc6c0 (most recent call first):
  File "/x/sitecustomize.py", line 77 in _dump_on_request
  File "/usr/lib/python3.11/threading.py", line 982 in run

Thread 0x00007fa33dbdd000 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/data/loader.py", line 12 in fetch

Current thread 0x00007fa33ea75b80 (most recent call first):
  File "/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/job/train.py", line 88 in train_step
  File "/job/train.py", line 99 in <module>
"""

PYSPY = """\
Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    sleep_forever (hang.py:28)
    main (hang.py:58)
    <module> (hang.py:73)
Thread 4250 (idle): "loader"
    wait (threading.py:320)
"""


def test_faulthandler_dump_parses_every_thread_but_ddptuis_own() -> None:
    threads = parse_stacks(FAULTHANDLER)
    assert len(threads) == 2
    main = threads[-1]
    assert [f.function for f in main.frames] == ["all_reduce", "wrapper", "train_step", "<module>"]
    assert str(main.frames[2]) == "/job/train.py:88 in train_step"


def test_py_spy_dump_parses_too() -> None:
    threads = parse_stacks(PYSPY)
    assert [t.frames[0].function for t in threads] == ["sleep_forever", "wait"]
    assert threads[0].frames[0].where == "hang.py:28"


def test_the_odd_rank_out_is_the_suspect_with_its_sleep_shown() -> None:
    ranks = ranks_from_report("local0", GLOO_SKIP)
    groups = group_stacks(ranks)
    assert [g.ranks for g in groups] == [(1,), (0,)]
    assert suspects(groups) == [1]
    assert groups[0].label.startswith("time.sleep(3600) <- sleep_forever (hang.py:")
    assert groups[1].label.startswith("all_reduce <- main (hang.py:")
    assert groups[1].in_collective and not groups[0].in_collective


def test_most_ranks_in_one_place_the_few_elsewhere_are_suspects() -> None:
    ranks = ranks_from_report("n", GLOO_SKIP)
    waiting = next(r for r in ranks if r.rank == 0)
    many = [
        type(waiting)(rank, 0, "n", 100 + rank, waiting.threads, waiting.sources)
        for rank in (0, 2, 3)
    ]
    odd = next(r for r in ranks if r.rank == 1)
    groups = group_stacks([*many, odd])
    assert [(g.ranks, g.suspect) for g in groups] == [((1,), True), ((0, 2, 3), False)]


def test_flight_recorder_names_the_rank_that_never_entered_the_collective() -> None:
    gaps = analyse(GLOO_SKIP["fr"])
    assert len(gaps) == 1
    gap = gaps[0]
    assert (gap.missing, gap.entered, gap.op) == ((1,), (0,), "gloo:all_reduce")
    assert gap.describe().startswith(f"rank 1 never entered collective {gap.seq} (gloo:all_reduce")


def _running(m: JobWatch, now: float) -> None:
    m.board.assign("n0", Assigned(0, (0, 1), (0, 1), 0))
    m.feed_lines("n0", ["[ddptui:0:0]:step=1", "[ddptui:1:1]:step=1"], now=now)


def test_every_rank_silent_for_the_timeout_is_a_stall_and_ranks_turn_amber() -> None:
    m = JobWatch(["n0"], 2)
    _running(m, now=100.0)
    m.board.last_progress = 100.0
    assert not [e for e in m.tick(105.0, 6.0) if isinstance(e, StallReport)]
    events = m.tick(107.0, 6.0)
    stall = [e for e in events if isinstance(e, StallReport)]
    assert len(stall) == 1 and stall[0].since_s == 7.0 and not stall[0].groups
    assert {c.state for c in m.board.all_cells()} == {RankState.HUNG}
    assert stall[0].to_dict() == {
        "event": "stall",
        "ts": 107.0,
        "since_s": 7.0,
        "suspects": [],
        "groups": [],
        "method": "",
        "deadlock": False,
        "flight_recorder": [],
        "budget_s": 6.0,
    }
    assert not [e for e in m.tick(108.0, 6.0) if isinstance(e, StallReport)]  # said once
    assert not JobWatch(["n0"], 2).tick(1e9, 0)  # 0: off


def test_stacks_name_the_suspect_and_the_stall_is_said_again() -> None:
    m = JobWatch(["local0"], 2)
    m.board.assign("local0", Assigned(0, (0, 1), (0, 1), 0))
    m.feed_lines("local0", ["[ddptui:0:0]:step=1", "[ddptui:1:1]:step=1"], now=100.0)
    m.board.last_progress = 100.0
    m.tick(110.0, 6.0)
    events = m.stacks_taken({"local0": GLOO_SKIP}, now=111.0)
    report = next(e for e in events if isinstance(e, StacksReport))
    assert report.method == "faulthandler-signal" and report.collectives
    stall = next(e for e in events if isinstance(e, StallReport))
    data = stall.to_dict()
    assert data["suspects"] == [1] and data["method"] == "faulthandler-signal"
    assert [g["ranks"] for g in data["groups"]] == [[1], [0]]
    assert data["groups"][0]["stack"][0].endswith(" in sleep_forever")
    # the operator's teardown: its echo is no failure, the suspect stays named
    m.teardown_started()
    m.node_exited("local0", -15)
    told = m.summary()
    assert told.stall is not None and told.stall.suspects == (1,)
    assert [(r.rank, r.cause) for r in told.ranks] == [
        (0, causes.IN_COLLECTIVE),
        (1, causes.SUSPECT),
    ]
    assert told.culprit is not None and told.culprit.rank == 1
    assert {r.state for r in told.ranks} == {RankState.STOPPED} and not told.failures


def test_progress_again_ends_the_stall() -> None:
    m = JobWatch(["n0"], 2)
    _running(m, now=100.0)
    m.board.last_progress = 100.0
    m.tick(110.0, 6.0)
    m.feed_lines("n0", ["[ddptui:0:0]:step=2"], now=111.0)
    m.tick(112.0, 6.0)
    assert not m.stall.stalled


def test_a_node_that_gave_no_stacks_is_said() -> None:
    m = JobWatch(["a", "b"], 1)
    events = m.stacks_taken({"a": {"method": "none", "ranks": []}, "b": "no route to host"})
    report = next(e for e in events if isinstance(e, StacksReport))
    assert report.problems == ("b: no route to host",)


# trainer/hang.py --deadlock on 2 nodes x 2 local ranks (gloo): both nodes' raw reports
GLOO_DEADLOCK = json.loads((DATA / "gloo_deadlock_collect.json").read_text())


def _stalled_world(m: JobWatch) -> None:
    for node, ranks in (("local0", (0, 1)), ("local1", (2, 3))):
        m.board.assign(node, Assigned(0, (0, 1), ranks, 0))
        lines = [f"[ddptui:{r}:{lr}]:step=1" for lr, r in enumerate(ranks)]
        m.feed_lines(node, lines, now=100.0)
    m.board.last_progress = 100.0
    m.tick(110.0, 6.0)


def test_deadlock_names_both_groups_with_their_collectives() -> None:
    m = JobWatch(["local0", "local1"], 2)
    _stalled_world(m)
    events = m.stacks_taken(GLOO_DEADLOCK, now=111.0)
    stall = next(e for e in events if isinstance(e, StallReport)).to_dict()
    assert stall["deadlock"] and stall["suspects"] == [0, 1, 2, 3]
    assert {tuple(g["ranks"]): g["collective"] for g in stall["groups"]} == {
        (0, 1): "collective 4 (gloo:all_reduce) of group 0",
        (2, 3): "collective 1 (gloo:all_reduce) of group 1",
    }
    assert stall["flight_recorder"] == [
        "ranks 2, 3 never entered collective 4 (gloo:all_reduce [1024]) of group 0"
    ]
    report = next(e for e in events if isinstance(e, StacksReport))
    assert report.deadlock and all(g.suspect for g in report.groups)
    m.teardown_started()
    for node in ("local0", "local1"):
        m.node_exited(node, -9)
    told = m.summary()
    assert {r.cause for r in told.ranks} == {causes.DEADLOCK}
    assert {r.state for r in told.ranks} == {RankState.STOPPED} and told.culprit is None


def test_deadlock_from_stacks_alone_when_no_group_is_the_odd_one_out() -> None:
    ranks = [r for node, report in GLOO_DEADLOCK.items() for r in ranks_from_report(node, report)]
    groups = group_stacks(ranks)
    assert [(g.ranks, g.suspect) for g in groups] == [((0, 1), True), ((2, 3), True)]
    assert is_deadlock(groups)
    # two ranks in one collective, one in another: the one is the odd one out
    lone = group_stacks([r for r in ranks if r.rank in (0, 1, 2)])
    assert suspects(lone) == [2] and not is_deadlock(lone)
