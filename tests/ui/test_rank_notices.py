"""The console's own notes for what torchrun's agent reported (its lines are hidden)."""

from __future__ import annotations

from ddptui.core.events import RankChanged, RankState
from ddptui.ui.rank_notices import rank_notices


def test_rendezvous_restarts_and_failures_become_short_notes() -> None:
    assigned = [RankChanged(r, f"n{r // 2}", r % 2, RankState.ASSIGNED) for r in range(4)]
    notes = rank_notices({}, assigned)
    assert [(n.node, n.text) for n in notes] == [
        ("n0", "▸ rendezvous: n0 runs ranks 0-1"),
        ("n1", "▸ rendezvous: n1 runs ranks 2-3"),
    ]
    assert all(n.note for n in notes)
    known = {(e.node, e.local_rank): e for e in assigned}
    restarted = [RankChanged(r, f"n{r // 2}", r % 2, RankState.RUNNING, restarts=1) for r in (0, 1)]
    assert [n.text for n in rank_notices(known, restarted)] == [
        "▸ torchrun restarted the workers (1)"
    ]
    failed = RankChanged(3, "n1", 1, RankState.FAILED, -9, "killed")
    assert [n.text for n in rank_notices(known, [failed])] == [
        "▸ rank 3 failed: exit -9 (SIGKILL) — killed"
    ]
    assert rank_notices({**known, ("n1", 1): failed}, [failed]) == []  # said once


def test_a_big_rendezvous_is_one_note() -> None:
    assigned = [RankChanged(r, f"n{r // 8}", r % 8, RankState.ASSIGNED) for r in range(1024)]
    notes = rank_notices({}, assigned)
    assert [n.text for n in notes] == ["▸ rendezvous: 128 nodes run ranks 0-1023"]
