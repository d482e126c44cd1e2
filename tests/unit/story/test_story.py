"""The story's incidents from the detectors' events: one per cause, blame settled, order kept."""

from __future__ import annotations

from ddptui.core.diagnose.audit import CollectiveMismatch, MismatchKind
from ddptui.core.diagnose.audit_watch import MismatchReport
from ddptui.core.diagnose.signatures import Domain, Outlook, scheduler_end
from ddptui.core.diagnose.speed import StragglerReport
from ddptui.core.diagnose.stall_events import StallReport
from ddptui.core.diagnose.verdict import Role, Verdict, VerdictReport
from ddptui.core.events import AllocationChanged, Diagnosis, Event, RankChanged, RankState
from ddptui.core.monitor.cycles import CycleMember, CycleReport, RestartCycle
from ddptui.core.story.incident import IncidentKind, IncidentReport
from ddptui.core.story.story import Story


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.1
        return self.now


def told(story: Story, *events: Event) -> list[IncidentReport]:
    out: list[IncidentReport] = []
    for event in events:
        out += story.seen(event)
    return out


def running(rank: int, node: str) -> RankChanged:
    return RankChanged(rank, node, rank % 2, RankState.RUNNING)


def size_mismatch(culprits: tuple[int, ...], seq: int = 6) -> MismatchReport:
    return MismatchReport(
        CollectiveMismatch(
            "all_reduce",
            MismatchKind.SIZE,
            {0: "all_reduce [8] Float", 1: "all_reduce [4] Float"},
            "0",
            seq,
            culprits,
            "rank 1 passed [4], the others [8]" if culprits else "",
        ),
        "live",
    )


def verdict(
    rank: int, signature: str, node: str = "node0", *, final: bool = False
) -> VerdictReport:
    return VerdictReport(
        Verdict(node, rank, rank % 2, Role.INITIATING, signature, Domain.JOB, Outlook.FIX_FIRST,
                f"{signature} on rank {rank}", (f"evidence of {rank}",)),
        final=final,
    )  # fmt: skip


def test_a_mismatch_repeated_at_every_collective_is_one_incident() -> None:
    story = Story(Clock())
    reports = told(story, running(0, "node0"), running(1, "node0"), size_mismatch((1,)))
    reports += told(story, *(size_mismatch((), seq) for seq in range(7, 400)))
    assert len(story.incidents) == 1 and len(reports) == 1
    incident = story.incidents[0]
    assert incident.kind == IncidentKind.COLLECTIVE_MISMATCH and incident.blamed == (1,)
    assert incident.count == 394 and incident.hurt == (0,)
    assert story.headline().startswith("collective mismatch: rank 1 on node0 — ")


def test_gloo_aborting_the_receiver_first_never_blames_it() -> None:
    story = Story(Clock())
    told(story, running(0, "node0"), running(1, "node0"))
    early = told(story, verdict(0, "collective_mismatch"))
    assert early[0].incident.blamed == () and early[0].incident.hurt == (0,)
    later = told(story, size_mismatch((1,)), verdict(1, "collective_mismatch", final=True))
    assert all(0 not in r.incident.blamed for r in early + later)
    assert len(story.incidents) == 1
    lead = story.lead()
    assert lead is not None and lead.blamed == (1,) and lead.outlook == Outlook.FIX_FIRST
    assert story.headline().startswith("collective mismatch: rank 1 on node0")
    assert "fix it first" in story.headline()


def test_a_skipped_collective_is_a_hang_named_once_its_suspect_is_known() -> None:
    story = Story(Clock())
    told(story, running(0, "node0"), running(1, "node1"))
    told(story, StallReport(25.0), StallReport(26.0, suspects=(1,)))
    skipped = MismatchReport(
        CollectiveMismatch("all_reduce", MismatchKind.SKIPPED, {0: "all_reduce", 1: "absent"},
                           "0", 9, (1,), "rank 1 never entered it"),
        "stall",
    )  # fmt: skip
    told(story, skipped, verdict(1, "collective_mismatch", "node1", final=True))
    assert [i.kind for i in story.incidents] == [IncidentKind.HANG]
    assert story.headline().startswith("hang: rank 1 on node1")
    assert story.ended()[0].incident.over


def test_a_restart_closes_the_round_before_it_and_is_counted() -> None:
    story = Story(Clock())
    told(story, running(0, "node0"), running(1, "node0"), verdict(1, "killed"))
    member = CycleMember("node0", 0, (0, 1))
    cycle = RestartCycle(1, 1001.0, 2, (member,), "worker failure", "node0", 1, restarts=1,
                         max_restarts=3)  # fmt: skip
    reports = told(story, CycleReport(cycle), CycleReport(cycle))
    crash, restart = story.incidents
    assert crash.over and crash.kind == IncidentKind.CRASH and not restart.over
    assert restart.summary == "worker failure; restart 1 of 3"
    assert [r.incident.number for r in reports] == [1, 2]
    assert story.headline().startswith("crash: rank 1 on node0")


def test_a_requeued_jobs_fresh_round_is_told_as_the_requeue() -> None:
    """Slurm ran the job again: its new torchrun's round (restart count 0) is not a failure
    of the workers, whatever the round's own cause says; a real restart after it still is."""
    story = Story(Clock())
    told(story, running(0, "node0"), running(1, "node1"))
    members = (CycleMember("node0", 0, (0,)), CycleMember("node1", 1, (1,)))
    told(story, AllocationChanged("requeued", "77", ("node0", "node1"), "requeue 1", 1))
    fresh = RestartCycle(1, 1001.0, 2, members, "rank 0 on node0 failed (SIGTERM)", "node0", 0)
    told(story, CycleReport(fresh), CycleReport(fresh))
    (requeued,) = story.incidents
    assert requeued.kind == IncidentKind.RESTARTED and not requeued.blamed
    assert requeued.summary == "Slurm requeued job 77 (restart 1)"
    restart = RestartCycle(2, 1002.0, 2, members, "rank 1 on node1 failed", "node1", 1,
                           restarts=1, max_restarts=1)  # fmt: skip
    told(story, CycleReport(restart))
    assert story.incidents[-1].summary.endswith("restart 1 of 1")
    assert story.incidents[-1].blamed == (1,)


def test_a_straggler_is_one_incident_until_it_recovers() -> None:
    story = Story(Clock())
    told(story, running(0, "node0"), running(1, "node1"))
    slow = StragglerReport((1,), ("node1",), (), "arrival", ("rank 1: 40% of its peers' rate",))
    reports = told(story, slow, slow, slow)
    assert len(reports) == 1 and story.incidents[0].count == 3
    reports = told(story, StragglerReport((), (), (), "arrival", ()))
    assert reports[0].incident.over
    assert story.headline() == "straggler: rank 1 on node1 — rank 1: 40% of its peers' rate" + (
        " (seen 3 times)"
    )


def test_a_non_finite_loss_names_its_rank() -> None:
    story = Story(Clock())
    nan = Diagnosis("nan_or_inf", "loss is nan in rank 1's 35th report", "loss nan", 40, 5.0)
    reports = told(story, RankChanged(1, "node0", 1, RankState.RUNNING, diagnoses=(nan,)))
    assert reports[0].incident.kind == IncidentKind.NON_FINITE
    assert story.headline().startswith("non-finite metric: rank 1 on node0 — loss is nan in")


def test_a_failure_leads_over_the_operator_stop_and_a_straggler() -> None:
    story = Story(Clock())
    told(story, running(0, "node0"), running(1, "node0"))
    told(story, StragglerReport((0,), ("node0",), (), "arrival", ("slow",)))
    story.operator_stopped()
    assert story.lead() is not None and story.lead().kind == IncidentKind.OPERATOR  # type: ignore[union-attr]
    told(story, verdict(1, "cuda_oom", final=True))
    assert story.headline().startswith("out of memory: rank 1 on node0")


def test_an_incident_line_reads_back_from_events_jsonl() -> None:
    from ddptui.core.runs.event_log import decode_event

    story = Story(Clock())
    told(story, running(0, "node0"), running(1, "node0"))
    (report,) = told(story, size_mismatch((1,)))
    line = report.to_dict()
    assert line["event"] == "incident" and line["kind"] == "collective_mismatch"
    assert line["blamed"] == [1] and line["headline"] == story.headline()
    assert decode_event(report.to_json()) == report


def test_the_scheduler_s_end_leads_over_the_ranks_it_stopped() -> None:
    story = Story(Clock())
    told(story, running(0, "node1"), verdict(0, "exit", "node1"))
    assert story.headline().startswith("crash: rank 0 on node1")
    ended = "the job reached its Slurm time limit (node1: *** STEP 1.0 DUE TO TIME LIMIT ***)"
    story.scheduler_ended(ended)
    told(story, verdict(0, "exit", "node1", final=True))  # "exited without saying why"
    assert story.headline().startswith(f"ended by the scheduler — {ended}")


def test_a_node_slurm_lost_is_named_by_the_line_not_by_the_log_it_is_in() -> None:
    """srun's `Node failure on node3` lands in every step's log (node1's first): the lead is
    node3 lost, none of the ranks the job's end stopped."""
    story = Story(Clock())
    told(story, running(0, "node1"), running(2, "node3"), verdict(0, "exit", "node1"))
    ended = scheduler_end({"node1": ["srun: error: Node failure on node3"]})
    assert ended == "Slurm lost a node of the job (NODE_FAIL) (srun: error: Node failure on node3)"
    story.scheduler_ended(ended)
    told(story, verdict(0, "exit", "node1", final=True))
    lead = story.lead()
    assert lead is not None and lead.kind == IncidentKind.NODE_LOST
    assert lead.nodes == ("node3",) and not lead.blamed
    assert story.headline().startswith(f"node lost: node node3 — {ended}")


def test_a_world_apart_is_a_launch_failure_however_far_its_ranks_got() -> None:
    apart = "node2 was started for another rendezvous: its agent asked 10.0.0.12:29400"
    for ran in (False, True):
        story = Story(Clock())
        if ran:
            told(story, running(0, "node1"))
        story.launch_failed(apart)
        assert story.headline().startswith(f"launch failed — {apart}")
    port = "port 29400 on node1 is in use by PID 42 (user root, python3): choose another"
    story = Story(Clock())
    told(story, running(0, "node1"))
    story.launch_failed(port)
    assert story.headline().startswith(f"refused before launch — {port}")


def test_a_node_slow_to_start_is_a_launch_failure_a_relaunch_may_cure_not_a_refusal() -> None:
    """A 128-node job on a loaded machine: one node's start timed out before any rank ran."""
    slow = "local6: timed out"
    story = Story(Clock())
    story.launch_failed(slow)
    lead = story.lead()
    assert lead is not None and lead.kind == IncidentKind.LAUNCH_FAILED
    assert lead.outlook == Outlook.RESTART_HELPS and lead.domain == Domain.INFRASTRUCTURE
    assert story.headline().startswith(f"launch failed — {slow}")
    # a script missing is still the operator's to fix, refused before launch
    missing = "script train.py not found on node1: copy it to every node at the same path"
    story = Story(Clock())
    story.launch_failed(missing)
    assert story.lead().kind == IncidentKind.REFUSED


def test_a_connection_lost_in_an_elastic_job_is_one_node_lost_incident_told_going_on() -> None:
    """The console tells the host lost, then the membership says the job goes on without
    it: the same loss, one incident (not an agent lost beside it)."""
    from ddptui.core.events import NodeChanged, NodeState
    from ddptui.core.monitor.cycles import MembershipChange, MembershipChanged

    story = Story(Clock())
    told(story, *(running(r, f"node{r + 1}") for r in range(3)))
    told(story, NodeChanged("node3", NodeState.FAILED, None, "connection lost"))
    on = "2 node(s) go on (at least 2)"
    told(story, MembershipChanged("node3", MembershipChange.LOST, ("node1", "node2"), 2, on))
    assert [i.kind for i in story.incidents] == [IncidentKind.NODE_LOST]
    lead = story.lead()
    assert lead is not None and lead.nodes == ("node3",) and lead.count == 1
    assert lead.summary == f"its connection was lost; {on}"
    assert story.headline().startswith(f"node lost: node node3 — its connection was lost; {on}")


def test_a_node_slurm_lost_leads_and_the_tasks_srun_killed_for_it_are_not_lost_agents() -> None:
    """Slurm lost node3: srun then kills the step's other tasks (exit -9, "Killed"). Those
    nodes lost nothing of their own; node3 alone is lost, told in Slurm's words."""
    from ddptui.core.events import LOST_BY, NodeChanged, NodeState

    story = Story(Clock())
    told(story, *(running(r, f"node{r + 1}") for r in range(3)))
    said = "Slurm lost the node (srun: error: Node failure on node3)"
    told(story, NodeChanged("node3", NodeState.FAILED, None, f"{LOST_BY}{said}"))
    told(story, *(NodeChanged(n, NodeState.FAILED, -9) for n in ("node1", "node2")))
    assert [(i.kind, i.nodes) for i in story.incidents] == [(IncidentKind.NODE_LOST, ("node3",))]
    assert story.headline().startswith(f"node lost: node node3 — {said}")
    # a node killed with nothing lost before it is a lost agent, as ever
    alone = Story(Clock())
    told(alone, running(0, "node1"), NodeChanged("node1", NodeState.FAILED, -9))
    assert [i.kind for i in alone.incidents] == [IncidentKind.AGENT_LOST]


def test_a_round_after_a_lost_node_names_the_node_once() -> None:
    story = Story(Clock())
    told(story, running(0, "node1"), running(1, "node2"), running(2, "node3"))
    members = (CycleMember("node1", 0, (0,)), CycleMember("node2", 1, (1,)))
    cut = "node node3 lost (its connection: no exit code came)"
    told(story, CycleReport(RestartCycle(1, 1001.0, 2, members, cut, "node3", None, restarts=1,
                                         max_restarts=3)))  # fmt: skip
    (restart,) = story.incidents
    assert restart.headline() == (
        "restarted: node node3 — lost (its connection: no exit code came); restart 1 of 3"
    )
