"""The monitor of a torchft job: each node a replica group whose torchrun numbers its ranks
from 0, shown at their place in the job; the first node's Lighthouse lines read as quorums
(the real Lighthouse's log, tests/data/torchft/kill_heal); no rendezvous rounds made of the
groups' own rendezvous."""

from __future__ import annotations

from ddptui.core.events import RankChanged, RankState
from ddptui.core.monitor.lighthouse import QuorumReport
from ddptui.core.monitor.monitor import Monitor
from tests.cases import DATA

KILL_HEAL = DATA / "torchft" / "kill_heal"
# a group's agent's rendezvous result, as torchrun logged it (tests/data/stall/gpu_h100x2)
ASSIGNED = (DATA / "stall" / "gpu_h100x2" / "node.log").read_text().splitlines()[33:46]


def test_each_group_s_ranks_are_shown_after_the_groups_before_it() -> None:
    monitor = Monitor(["n0", "n1", "n2"], 2, replica_groups=True)
    events = monitor.feed_lines("n2", ["[ddptui:1:1]:ft_2 rank 1: step=3 loss=0.5"], now=1.0)
    ranks = [(e.rank, e.node, e.local_rank) for e in events if isinstance(e, RankChanged)]
    assert ranks == [(5, "n2", 1)]
    plain = Monitor(["n0", "n1", "n2"], 2)  # one world: the ranks as printed
    events = plain.feed_lines("n2", ["[ddptui:1:1]:step=3"], now=1.0)
    assert [e.rank for e in events if isinstance(e, RankChanged)] == [1]


def test_the_lighthouse_lines_are_quorums_and_a_group_killed_comes_back_behind() -> None:
    monitor = Monitor(["n0", "n1"], 1, replica_groups=True)
    lines = (KILL_HEAL / "lighthouse.log").read_text().splitlines()
    reports = []
    for n, line in enumerate(lines):  # as they came, a tenth of a second apart
        reports += [
            e for e in monitor.feed_lines("n0", [line], now=n / 10) if isinstance(e, QuorumReport)
        ]
    changes = [r.change for r in reports if r.change is not None]
    assert [(c.quorum_id, c.joined, c.left) for c in changes] == [
        (1, ("ft_0",), ()),
        (2, ("ft_1",), ()),
        (3, (), ("ft_1",)),
        (4, ("ft_1",), ()),
    ]
    assert dict(changes[-1].behind)["ft_1"] == 42
    assert "ft_1 joined (42 steps behind: heals from a peer)" in changes[-1].said()
    # between changes, the steps at most once a second: not one report per quorum line
    quiet = [r.ts for r in reports if r.change is None]
    assert quiet and all(b - a >= 1.0 for a, b in zip(quiet, quiet[1:], strict=False))
    assert len(reports) < sum("Quorum! " in line for line in lines) / 2
    assert reports[-1].heartbeating >= 1
    assert monitor.summary().quorums == tuple(changes)


def test_a_quick_restart_is_another_incarnation_not_the_same_group() -> None:
    member = (
        'QuorumMember {{ replica_id: "ft_{}:{}", address: "a", store_address: "s", '
        'step: {}, world_size: 1, shrink_only: false, commit_failures: 0, data: "" }}'
    )

    def line(quorum_id: int, *members: tuple[int, str, int]) -> str:
        inner = ", ".join(member.format(*m) for m in members)
        return (
            "2026-11-27T16:50:37.838 [INFO] [torchft::lighthouse] - Quorum! Quorum { "
            f"quorum_id: {quorum_id}, participants: [{inner}], created: None }}"
        )

    monitor = Monitor(["n0", "n1"], 1, replica_groups=True)
    monitor.feed_lines("n0", [line(2, (0, "a", 10), (1, "b", 10))], now=1.0)
    events = monitor.feed_lines("n0", [line(3, (0, "a", 11), (1, "c", 0))], now=1.1)
    change = next(e.change for e in events if isinstance(e, QuorumReport))
    assert change is not None and change.restarted == ("ft_1",) and change.joined == ()
    assert change.said() == "quorum 3: ft_1 started again (11 steps behind: heals from a peer)"


def test_the_groups_own_rendezvous_make_no_rounds_and_their_agents_ranks_shift() -> None:
    monitor = Monitor(["n0", "n1"], 2, replica_groups=True)
    events = monitor.feed_lines("n1", ASSIGNED, now=1.0)
    assigned = {(e.rank, e.local_rank) for e in events if isinstance(e, RankChanged)}
    assert assigned == {(2, 0), (3, 1)}
    assert all(e.state == RankState.ASSIGNED for e in events if isinstance(e, RankChanged))
    monitor.feed_lines("n0", ASSIGNED, now=1.0)
    assert monitor.summary().cycles == ()  # each group's own rendezvous is not a job's round
