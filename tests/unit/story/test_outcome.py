"""The outcome's words: the summary's second line for each way a run ends."""

from __future__ import annotations

from ddptui.core.diagnose.stall_events import StallGroup, StallReport
from ddptui.core.events import RankState, RankSummary
from ddptui.core.story import outcome
from ddptui.core.story.incident import Incident, IncidentKind

DONE, FAILED, STOPPED = RankState.DONE, RankState.FAILED, RankState.STOPPED


def _rank(rank: int, node: str, state: RankState, code: int | None = None, **kw) -> RankSummary:
    return RankSummary(rank, node, rank % 2, state, code, **kw)


def test_the_second_line_never_names_a_survivor_of_the_rank_the_lead_blames() -> None:
    """An agent lost on node2: its ranks were stopped by the node helper; a survivor on
    node1 failed first by the clock (its peer closed). The lead blames node2."""
    survivor = _rank(0, "node1", FAILED, 1, error="RuntimeError: Connection closed by peer")
    lost = _rank(2, "node2", FAILED, -15)
    ranks = [survivor, _rank(1, "node1", DONE, 0), lost, _rank(3, "node2", STOPPED)]
    lead = Incident(1, IncidentKind.AGENT_LOST, "its agent was killed", nodes=("node2",))
    assert outcome.first_blamed(lead, survivor, ranks) is lost
    assert outcome.failed_first(lost) == "rank 2 on node2 failed first (exit -15)"
    # the lead names ranks, none of which failed: it says it alone
    hang = Incident(2, IncidentKind.HANG, "rank 3 never entered collective 7", blamed=(3,))
    assert outcome.first_blamed(hang, survivor, ranks) is None
    # no lead, or one that blames no one: the monitor's first failure
    assert outcome.first_blamed(None, survivor, ranks) is survivor
    said = outcome.failed_first(survivor)
    assert said == "rank 0 on node1 failed first (exit 1): RuntimeError: Connection closed by peer"


def test_a_rank_never_numbered_has_the_backends_words() -> None:
    unnumbered = RankSummary(None, "node1", 0, FAILED, 1)
    refused = "srun: error: Unable to create step for job 12: Invalid generic resource"
    assert outcome.failed_first(unnumbered, refused) == refused


def test_the_operators_stop_says_what_the_run_was_doing() -> None:
    ranks = [_rank(0, "n0", DONE, 0), _rank(1, "n0", STOPPED), _rank(2, "n1", STOPPED)]
    assert outcome.operator_stop(ranks, None, None) == "torn down by the operator (1/3 ranks done)"
    assert outcome.operator_stop(ranks, None, None, drill=True).startswith("ended by a drill")
    stall = StallReport(30.0, suspects=(2,))
    assert outcome.operator_stop(ranks, stall, None).endswith("; it had stalled (suspects: 2)")
    groups = (
        StallGroup((0, 1), ("f",), "collective 4 (gloo:all_reduce) of group 0"),
        StallGroup((2,), ("g",), "collective 4 (gloo:all_reduce) of group 1"),
    )
    deadlock = StallReport(30.0, suspects=(0, 1, 2), groups=groups, deadlock=True)
    assert outcome.operator_stop(ranks, deadlock, None).endswith(
        "; it had stalled in a deadlock: ranks 0, 1 in collective 4 (gloo:all_reduce) of "
        "group 0 and ranks 2 in collective 4 (gloo:all_reduce) of group 1"
    )


def test_a_detached_run_says_the_way_back() -> None:
    assert (
        outcome.detached("r1", False) == "detached: the job runs on; `ddptui attach r1` follows it"
    )
    assert outcome.detached("r1", True).endswith("; a watcher follows it meanwhile to notify")


def test_the_scheduler_s_end_moves_the_culprit_to_whom_the_lead_names() -> None:
    """Slurm lost node3 and ended the job: rank 1 on node2, stopped first by the clock, was
    the monitor's culprit; the lead names node3, so its rank is the one marked (the grid,
    history and the summary say who the first line does). A time limit names nobody."""
    ranks = [
        _rank(0, "node1", FAILED, None),
        _rank(1, "node2", FAILED, None, culprit=True),
        _rank(2, "node3", FAILED, None),
    ]
    lost = Incident(1, IncidentKind.NODE_LOST, "Slurm lost a node of the job", nodes=("node3",))
    marked = outcome.marked_by_lead(lost, ranks)
    assert [r.culprit for r in marked] == [False, False, True]
    limit = Incident(1, IncidentKind.PREEMPTED, "the job reached its Slurm time limit")
    assert not any(r.culprit for r in outcome.marked_by_lead(limit, ranks))
    blamed = Incident(1, IncidentKind.CRASH, "rank 0 crashed", blamed=(0,), nodes=("node1",))
    assert [r.culprit for r in outcome.marked_by_lead(blamed, ranks)] == [True, False, False]
