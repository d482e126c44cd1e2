"""The job's rhythm: step budgets from each rank's interval, quiet phases recognised by the line
before them, learned from their length, and a hang in the step loop kept on the step budget."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.rhythm import (
    FIRST_PHASE_FACTOR,
    PHASE_MARGIN,
    STEP_FACTOR,
    JobRhythm,
    cue_key,
    label_of,
)
from ddptui.core.diagnose.stall_events import QuietPhase, StallReport, StepBudgets
from ddptui.core.events import Event, RankChanged, RankState
from ddptui.core.monitor.agent_log import Assigned

STEP = re.compile(r"step[= ](\d+)")
KEYS = [("n0", 0), ("n0", 1)]


def _rhythm() -> JobRhythm:
    return JobRhythm(lambda line: STEP.search(line) is not None)


def _steps(rhythm: JobRhythm, start: float, count: int, every: float, first: int = 0) -> float:
    """Both ranks print a step line every `every` s; returns the time of the last."""
    now = start
    for n in range(count):
        now = start + n * every
        for rank, key in enumerate(KEYS):
            rhythm.spoke(key, rank, now, f"[rank{rank}] step={first + n} loss=0.5", stepped=True)
    return now


def _checkpoint(rhythm: JobRhythm, now: float, length: float, floor: float) -> list:
    """Rank 0 says it saves; the job is silent `length` s (ticked each second), then steps."""
    rhythm.spoke(KEYS[0], 0, now, "[rank0] saving checkpoint to /ckpt/step_0040.pt")
    events = []
    t = now
    while t < now + length:
        t += 1.0
        events += rhythm.tick(t, floor, KEYS)
        assert t - now <= rhythm.job_budget(floor, KEYS), "a checkpoint within budget stalled"
    for rank, key in enumerate(KEYS):
        events += rhythm.spoke(key, rank, now + length, f"[rank{rank}] step=41", stepped=True)
    return [e for e in events if isinstance(e, QuietPhase)]


def test_the_step_budget_is_five_intervals_never_under_the_floor() -> None:
    rhythm = _rhythm()
    assert rhythm.budget(KEYS[0], 60.0) == 60.0  # nothing learned: the floor
    _steps(rhythm, 100.0, 10, 2.0)
    assert rhythm.ranks[KEYS[0]].interval == 2.0
    assert rhythm.budget(KEYS[0], 1.0) == STEP_FACTOR * 2.0
    assert rhythm.budget(KEYS[0], 60.0) == 60.0
    assert rhythm.job_budget(1.0, KEYS) == 10.0


def test_a_named_checkpoint_is_a_phase_first_by_its_name_then_by_its_length() -> None:
    rhythm = _rhythm()
    now = _steps(rhythm, 100.0, 10, 1.0)
    first = _checkpoint(rhythm, now, 150.0, floor=60.0)
    began, ended = first
    assert began.ended is None and began.label == "checkpoint"
    assert began.budget_s == FIRST_PHASE_FACTOR * 60.0
    assert began.began == now and began.ranks == (0, 1)
    assert began.cue.endswith("saving checkpoint to /ckpt/step_0040.pt")
    assert ended.ended == now + 150.0 and ended.began == began.began
    assert rhythm.phase is None
    now = _steps(rhythm, now + 151.0, 10, 1.0, first=42)
    second = _checkpoint(rhythm, now, 150.0, floor=60.0)
    assert [e.budget_s for e in second] == [150.0 * PHASE_MARGIN] * 2
    assert rhythm.phases == [first[1], second[1]]


def test_a_hang_after_a_step_line_keeps_the_step_budget_however_long_the_checkpoints() -> None:
    rhythm = _rhythm()
    now = _steps(rhythm, 100.0, 10, 1.0)
    _checkpoint(rhythm, now, 150.0, floor=60.0)
    now = _steps(rhythm, now + 151.0, 10, 1.0, first=42)
    for t in range(int(now) + 1, int(now) + 30):
        assert not [e for e in rhythm.tick(float(t), 2.0, KEYS) if isinstance(e, QuietPhase)]
    assert rhythm.phase is None
    assert rhythm.job_budget(2.0, KEYS) == STEP_FACTOR * 1.0


def test_an_unnamed_quiet_stretch_is_learned_by_the_line_before_it() -> None:
    rhythm = _rhythm()
    now = _steps(rhythm, 100.0, 10, 1.0)
    rhythm.spoke(KEYS[1], 1, now, "[rank1] writing 8 shards")
    for t in range(1, 40):
        assert not [e for e in rhythm.tick(now + t, 20.0, KEYS) if isinstance(e, QuietPhase)]
    rhythm.spoke(KEYS[1], 1, now + 40.0, "[rank1] step=11", stepped=True)
    assert rhythm.seen[cue_key("[rank1] writing 8 shards")].longest == 40.0
    now = _steps(rhythm, now + 41.0, 10, 1.0, first=12)
    rhythm.spoke(KEYS[1], 1, now, "[rank1] writing 16 shards")
    events = [e for t in range(1, 10) for e in rhythm.tick(now + t, 20.0, KEYS)]
    phase = next(e for e in events if isinstance(e, QuietPhase))
    assert phase.label == "quiet" and phase.budget_s == 40.0 * PHASE_MARGIN


def test_a_named_line_the_loop_goes_on_after_at_once_is_no_cue() -> None:
    rhythm = _rhythm()
    now = 100.0
    for n in range(10):  # every step says it evaluated, and steps on
        now = 100.0 + n
        for rank, key in enumerate(KEYS):
            rhythm.spoke(key, rank, now, f"step={n}", stepped=True)
            rhythm.spoke(key, rank, now + 0.1, f"eval loss 0.{n}")
    events = [e for t in range(1, 30) for e in rhythm.tick(now + t, 2.0, KEYS)]
    assert not [e for e in events if isinstance(e, QuietPhase)]
    assert rhythm.job_budget(2.0, KEYS) < 2.0 * FIRST_PHASE_FACTOR


def test_step_budgets_are_told_once_and_again_when_one_moves() -> None:
    rhythm = _rhythm()
    now = _steps(rhythm, 100.0, 10, 1.0)
    told = [e for e in rhythm.tick(now + 0.5, 1.0, KEYS) if isinstance(e, StepBudgets)]
    assert [(b.rank, b.interval_s, b.budget_s) for b in told[0].ranks] == [
        (0, 1.0, 5.0),
        (1, 1.0, 5.0),
    ]
    assert not rhythm.tick(now + 0.6, 1.0, KEYS)
    now = _steps(rhythm, now + 2.0, 40, 2.0)
    told = [e for e in rhythm.tick(now + 0.5, 1.0, KEYS) if isinstance(e, StepBudgets)]
    assert [b.budget_s for b in told[0].ranks] == [10.0, 10.0]


def test_labels_and_cues() -> None:
    assert label_of("Saving checkpoint at epoch 3") == "checkpoint"
    assert label_of("ckpt written") == "checkpoint"
    assert label_of("Running validation") == "evaluation"
    assert label_of("epoch 3 step 40 loss 0.2") == ""
    assert cue_key("[rank3]: saving ckpt-200") == cue_key("[rank0]: saving ckpt-400")


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.floats(0.01, 400.0), min_size=1, max_size=60),
    named=st.lists(st.booleans(), min_size=60, max_size=60),
    floor=st.floats(0.0, 300.0),
)
def test_no_budget_is_under_the_floor_and_a_step_line_never_opens_a_phase(
    gaps: list[float], named: list[bool], floor: float
) -> None:
    rhythm = _rhythm()
    now = 0.0
    for n, gap in enumerate(gaps):
        now += gap
        line = "saving checkpoint" if named[n] else f"step={n}"
        rhythm.tick(now - gap / 2, floor, KEYS)
        rhythm.spoke(KEYS[n % 2], n % 2, now, line, stepped=not named[n])
        for key in KEYS:
            assert rhythm.budget(key, floor) >= floor
        assert rhythm.job_budget(floor, KEYS) >= floor
    if not named[len(gaps) - 1] and not named[len(gaps) - 2 if len(gaps) > 1 else 0]:
        rhythm.tick(now + 1e4, floor, KEYS)
        assert rhythm.phase is None


def _monitor_steps(m: JobWatch, start: float, count: int, first: int) -> float:
    now = start
    for n in range(count):
        now = start + n
        m.feed_lines("n0", [f"[ddptui:{r}:{r}]:step={first + n}" for r in (0, 1)], now=now)
        m.tick(now + 0.5, 60.0)
    return now


def test_the_monitor_calls_a_checkpoint_a_phase_and_a_hang_in_the_step_loop_a_stall() -> None:
    m = JobWatch(["n0"], 2)
    m.board.assign("n0", Assigned(0, (0, 1), (0, 1), 0), now=99.0)
    now = _monitor_steps(m, 100.0, 10, 0)
    events: list[Event] = []
    for _ in range(2):  # two checkpoints of 150 s, the hang timeout 60 s
        m.feed_lines("n0", ["[ddptui:0:0]:saving checkpoint ckpt-10.pt"], now=now)
        events += [e for t in range(1, 150) for e in m.tick(now + t, 60.0)]
        now = _monitor_steps(m, now + 150.0, 10, 10)
    assert not [e for e in events if isinstance(e, StallReport)]
    assert {c.state for c in m.board.all_cells()} == {RankState.RUNNING}
    phases = [e for e in events if isinstance(e, QuietPhase)]
    assert [(p.label, p.ended is None, p.budget_s) for p in phases] == [
        ("checkpoint", True, 300.0),
        ("checkpoint", True, 225.0),
    ]
    hang = [e for t in range(1, 70) for e in m.tick(now + t, 60.0)]
    stall = next(e for e in hang if isinstance(e, StallReport))
    assert stall.budget_s == 60.0 and 60.0 < stall.since_s <= 62.0


@settings(max_examples=100, deadline=None)
@given(
    interval=st.floats(0.05, 20.0),
    floor=st.floats(1.0, 300.0),
    checkpoints=st.lists(st.floats(1.0, 900.0), max_size=3),
)
def test_a_hang_in_the_step_loop_is_named_within_its_step_budget_whatever_came_before(
    interval: float, floor: float, checkpoints: list[float]
) -> None:
    rhythm = _rhythm()
    now = _steps(rhythm, 100.0, 12, interval)
    for length in checkpoints:  # phases of any length, learned
        rhythm.spoke(KEYS[0], 0, now, "[rank0] saving checkpoint")
        rhythm.tick(now + length / 2, floor, KEYS)
        now = _steps(rhythm, now + length, 12, interval)
    budget = max(floor, STEP_FACTOR * interval)
    for t in (1.0, budget / 2, budget * 2, budget * 10):  # the hang, ticked as it lasts
        rhythm.tick(now + t, floor, KEYS)
        assert rhythm.phase is None
        assert abs(rhythm.job_budget(floor, KEYS) - budget) <= 1e-6 * budget


def test_a_learned_cue_the_loop_then_goes_on_after_at_once_is_the_loops_own() -> None:
    rhythm = _rhythm()
    now = _steps(rhythm, 100.0, 10, 1.0)
    rhythm.spoke(KEYS[0], 0, now, "[rank0] fetching shard 3")  # a slow fetch, once: 30 s
    for t in range(1, 30):
        rhythm.tick(now + t, 10.0, KEYS)
    rhythm.spoke(KEYS[0], 0, now + 30.0, "[rank0] step=10", stepped=True)
    assert cue_key("[rank0] fetching shard 3") in rhythm.seen
    now += 30.0
    for n in range(5):  # then every step fetches a shard, at once
        now += 1.0
        rhythm.spoke(KEYS[0], 0, now, "[rank0] fetching shard 4")
        rhythm.spoke(KEYS[0], 0, now + 0.1, f"[rank0] step={11 + n}", stepped=True)
    rhythm.spoke(KEYS[0], 0, now + 1.0, "[rank0] fetching shard 5")  # and hangs after it
    events = [e for t in range(2, 40) for e in rhythm.tick(now + t, 10.0, KEYS)]
    assert not [e for e in events if isinstance(e, QuietPhase)]
    assert rhythm.job_budget(10.0, KEYS) == 10.0


def test_the_ranks_not_back_from_a_phase_yet_keep_its_budget_a_tick_longer() -> None:
    m = JobWatch(["n0", "n1"], 1)
    for i, node in enumerate(("n0", "n1")):
        m.board.assign(node, Assigned(i, (0,), (i,), 0), now=99.0)
    for n in range(10):
        for i, node in enumerate(("n0", "n1")):
            m.feed_lines(node, [f"[ddptui:{i}:0]:step={n}"], now=100.0 + n)
        m.tick(100.5 + n, 60.0)
    m.feed_lines("n0", ["[ddptui:0:0]:saving checkpoint"], now=109.2)
    for t in range(110, 259):
        m.tick(float(t), 60.0)
    m.feed_lines("n0", ["[ddptui:0:0]:step=10"], now=259.0)  # n0's line first, n1's later
    events = m.tick(259.5, 60.0)
    assert not [e for e in events if isinstance(e, RankChanged) and e.state == RankState.HUNG]
    assert m.rhythm.budget(("n1", 0), 60.0) == 300.0
    m.feed_lines("n1", ["[ddptui:1:0]:step=10"], now=260.0)
    assert m.rhythm.budget(("n1", 0), 60.0) == 60.0  # back: the step budget again


def test_a_checkpoint_already_under_way_when_the_console_attached_teaches_no_length() -> None:
    """Attached 60 s into a 150 s checkpoint (the endurance run's third stretch): the logs come
    back at once, the cue among them, so only the last 90 s are seen. Learned, they would budget
    the next 150 s checkpoint 135 s and call it a stall; the first-time budget holds instead."""
    rhythm = _rhythm()
    now = _steps(rhythm, 100.0, 10, 0.0)  # read back: every line at the attach
    seen = _checkpoint(rhythm, now, 90.0, floor=60.0)
    assert [e.budget_s for e in seen] == [FIRST_PHASE_FACTOR * 60.0] * 2
    now = _steps(rhythm, now + 91.0, 60, 1.0, first=42)
    again = _checkpoint(rhythm, now, 150.0, floor=60.0)  # within budget, or it asserts
    assert [e.budget_s for e in again] == [FIRST_PHASE_FACTOR * 60.0] * 2
    now = _steps(rhythm, now + 151.0, 60, 1.0, first=103)
    assert _checkpoint(rhythm, now, 150.0, floor=60.0)[0].budget_s == 150.0 * PHASE_MARGIN
