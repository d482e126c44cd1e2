"""One verdict per failure: the odd rank of a mismatch, the node of an infrastructure fault."""

from __future__ import annotations

import pickle

from ddptui.core.diagnose.audit import CollectiveMismatch, MismatchKind
from ddptui.core.diagnose.signatures import Domain, Outlook
from ddptui.core.diagnose.verdict import (
    RankFacts,
    Role,
    judge,
    role_of,
    roles,
    scheduler_verdict,
)
from ddptui.core.events import RankState, RankSummary
from ddptui.core.monitor import causes

GLOO_ABORT = (
    "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
    "  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match "
    "expected size. Is there a distributed collective mismatch in your code?",
)
PEER_RESET = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read"
    " error [127.0.0.1]:32994: Connection reset by peer.",
)


def gloo_size_mismatch() -> list[RankFacts]:
    """Local 2x2 on gloo: rank 1 all-reduces twice rank 0's size; gloo aborts rank 0, which
    the failure story names (SIGABRT), and rank 1 sees its peer go."""
    aborted = RankFacts("local0", 0, 0, causes.KILLED, True, (), GLOO_ABORT, -6)
    odd = RankFacts("local0", 1, 1, causes.PEER, False, ("peer_lost",), PEER_RESET, -15)
    stopped = [RankFacts("local1", i, 2 + i, causes.STOPPED, exit_code=-15) for i in (0, 1)]
    return [aborted, odd, *stopped]


MISMATCH = CollectiveMismatch(
    "all_reduce",
    MismatchKind.SIZE,
    {0: "all_reduce [4] Float", 1: "all_reduce [8] Float"},
    "0",
    6,
    (1,),
    "rank 1 passed all_reduce [8] Float at train.py:52, the others all_reduce [4] Float",
)


def test_the_audits_odd_rank_is_the_culprit_not_the_rank_gloo_aborted() -> None:
    verdict = judge(gloo_size_mismatch(), mismatches=[MISMATCH])
    assert verdict is not None
    assert (verdict.rank, verdict.node, verdict.role) == (1, "local0", Role.INITIATING)
    assert (verdict.signature, verdict.domain, verdict.outlook) == (
        "collective_mismatch",
        Domain.JOB,
        Outlook.FIX_FIRST,
    )
    assert verdict.evidence[0] == "rank 1: size mismatch in all_reduce #6 of group 0"
    assert "all_reduce [8] Float" in verdict.summary
    assert verdict.summary.startswith("rank 1: size mismatch in all_reduce #6 of group 0")


def test_without_the_audit_the_gloo_line_still_names_a_mismatch_and_warns_of_the_peer() -> None:
    verdict = judge(gloo_size_mismatch())
    assert verdict is not None and verdict.rank == 0
    assert verdict.signature == "collective_mismatch"
    assert "may be its peer" in verdict.summary
    assert "Received data size" in verdict.evidence[0]


def test_an_xid_on_a_node_outweighs_the_cuda_error_its_rank_raised() -> None:
    ranks = [
        RankFacts("gpu-a", 0, 0, causes.PEER, False, ("peer_lost",), PEER_RESET, 1),
        RankFacts(
            "gpu-b", 0, 1, causes.EXCEPTION, True, ("traceback",),
            ("RuntimeError: CUDA error: unspecified launch failure",), 1,
        ),
    ]  # fmt: skip
    kernel = {"gpu-b": ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen"]}
    verdict = judge(ranks, kernel)
    assert verdict is not None
    assert (verdict.node, verdict.rank, verdict.signature) == ("gpu-b", 1, "gpu_xid")
    assert (verdict.domain, verdict.outlook) == (Domain.INFRASTRUCTURE, Outlook.RESTART_ELSEWHERE)
    assert judge(ranks).signature == "exception"  # type: ignore[union-attr]


def test_a_lost_node_with_no_line_of_its_own_is_named_by_the_sessions_kind() -> None:
    ranks = [RankFacts("n0", 0, 0, causes.PEER, True, ("peer_lost",), PEER_RESET, 1)]
    verdict = judge(ranks, node_kinds={"n1": ["node_lost"]})
    assert verdict is not None
    assert (verdict.node, verdict.rank, verdict.signature) == ("n1", None, "node_lost")


def test_only_victims_make_a_cascade_verdict() -> None:
    ranks = [RankFacts("n0", 0, 0, causes.PEER, False, ("peer_lost",), PEER_RESET, 1)]
    verdict = judge(ranks)
    assert verdict is not None
    assert (verdict.signature, verdict.role, verdict.domain) == (
        "peer_lost",
        Role.CASCADE,
        Domain.UNKNOWN,
    )


def test_a_kill_that_left_nothing_is_told_as_such() -> None:
    verdict = judge([RankFacts("n0", 1, 1, causes.KILLED, True, (), ("step 9",), -9)])
    assert verdict is not None
    assert (verdict.signature, verdict.domain) == ("killed", Domain.UNKNOWN)
    assert "kernel log" in verdict.summary


def test_the_teardown_and_a_clean_run() -> None:
    torn = [RankFacts("n0", i, i, causes.TEARDOWN, exit_code=-15) for i in range(2)]
    verdict = judge(torn)
    assert verdict is not None and verdict.role == Role.TEARDOWN
    assert judge([RankFacts("n0", 0, 0)]) is None
    assert judge([]) is None


def test_roles() -> None:
    ranks = gloo_size_mismatch()
    culprit = ranks[1]
    assert [role_of(r, culprit) for r in ranks] == [
        Role.CASCADE,
        Role.INITIATING,
        Role.CASCADE,
        Role.CASCADE,
    ]
    torn = RankFacts("n0", 0, 0, causes.TEARDOWN)
    assert role_of(torn, culprit) == Role.TEARDOWN


def test_the_verdict_as_a_headless_line() -> None:
    verdict = judge(gloo_size_mismatch(), mismatches=[MISMATCH])
    assert verdict is not None
    line = verdict.to_dict()
    assert line["event"] == "verdict"
    assert {k: line[k] for k in ("rank", "node", "role", "domain", "outlook")} == {
        "rank": 1,
        "node": "local0",
        "role": "initiating",
        "domain": "job",
        "outlook": "fix_first",
    }


def test_each_failed_ranks_role_once_the_verdict_is_in() -> None:
    ranks = [*gloo_size_mismatch(), RankFacts("local1", 2, 4, causes.TEARDOWN), RankFacts("x", 0)]
    verdict = judge(ranks, mismatches=[MISMATCH])
    assert roles(ranks, verdict) == {
        ("local0", 0): Role.CASCADE,  # the rank gloo aborted: a victim of rank 1's size
        ("local0", 1): Role.INITIATING,
        ("local1", 0): Role.CASCADE,
        ("local1", 1): Role.CASCADE,
        ("local1", 2): Role.TEARDOWN,
    }


def test_verdicts_and_mismatches_cross_a_pipe() -> None:
    verdict = judge(gloo_size_mismatch(), mismatches=[MISMATCH])
    assert pickle.loads(pickle.dumps(verdict)) == verdict
    assert pickle.loads(pickle.dumps(MISMATCH)) == MISMATCH


def test_a_deadlock_between_groups_blames_no_rank() -> None:
    deadlock = CollectiveMismatch(
        "all_reduce",
        MismatchKind.DEADLOCK,
        {0: "all_reduce [4] Float", 1: "absent, waits in all_reduce [4] Float #1 of group 2"},
        "1",
        1,
        (),
        "rank 1 waits in another group",
    )
    verdict = judge([RankFacts("n0", 0, 0), RankFacts("n0", 1, 1)], mismatches=[deadlock])
    assert verdict is not None
    assert (verdict.rank, verdict.signature, verdict.domain) == (
        None,
        "collective_mismatch",
        Domain.JOB,
    )
    assert verdict.evidence == (
        "deadlock: groups wait on each other at all_reduce #1 of group 1: rank 1 waits in "
        "another group",
    )


def test_a_skipped_collective_names_the_rank_that_skipped_it() -> None:
    skip = CollectiveMismatch(
        "all_reduce", MismatchKind.SKIPPED, {0: "all_reduce [4] Float", 1: "absent"}, "0", 5, (1,),
        "rank 1 never entered it",
    )  # fmt: skip
    verdict = judge([RankFacts("n0", 0, 0), RankFacts("n1", 0, 1)], mismatches=[skip])
    assert verdict is not None and (verdict.node, verdict.rank) == ("n1", 1)
    assert verdict.summary == "rank 1 skipped all_reduce #5 of group 0: rank 1 never entered it"


def test_the_scheduler_s_end_is_its_own_verdict() -> None:
    """The job Slurm ended: the verdict is Slurm's, on the node it lost (that node's rank),
    or on no rank for a time limit; never that of a rank it stopped."""
    ranks = [
        RankSummary(0, "node1", 0, RankState.FAILED, None, culprit=True),
        RankSummary(2, "node3", 0, RankState.FAILED, None),
    ]
    lost = "Slurm lost a node of the job (NODE_FAIL) (srun: error: Node failure on node3)"
    said = scheduler_verdict(lost, ranks)
    assert said is not None and (said.signature, said.node, said.rank) == (
        "slurm_node_fail",
        "node3",
        2,
    )
    assert said.domain == Domain.INFRASTRUCTURE and said.outlook == Outlook.RESTART_ELSEWHERE
    assert said.role == Role.INITIATING and said.summary == lost
    limit = "the job reached its Slurm time limit (node1: *** STEP 1.0 DUE TO TIME LIMIT ***)"
    said = scheduler_verdict(limit, ranks)
    assert said is not None and said.signature == "slurm_time_limit"
    assert said.rank is None and said.node == ""
    assert scheduler_verdict("all fine", ranks) is None
