"""Provides Story: a run's incidents in order, built from what the detectors said, and its lead.

The monitor reads and keeps state, `diagnose/` judges; this orders and words. Every finding
the session emits (a failure's verdict, a collective mismatch, a stall, a straggler, a wrong
number, a restart round, a lost node, the operator's stop) becomes one incident or updates
the one it repeats: the NCCL audit's mismatch at every later collective counts, it is not a
new incident. The lead is the incident an operator reads first, on every surface: the
failure the verdict judged, else the first failure by the ranks' clocks, else the operator's
stop, else what only slowed the run.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime

from ddptui.core.diagnose.audit import CollectiveMismatch, MismatchKind
from ddptui.core.diagnose.audit_watch import MismatchReport
from ddptui.core.diagnose.settings import SettingsReport, differences_words
from ddptui.core.diagnose.signatures import (
    COLLECTIVE_MISMATCH,
    Domain,
    Outlook,
    Source,
    identify,
    lost_node,
)
from ddptui.core.diagnose.speed import StragglerReport
from ddptui.core.diagnose.stall_events import FlightRecorderReport, StallReport
from ddptui.core.diagnose.verdict import Role, Verdict, VerdictReport
from ddptui.core.events import (
    AllocationChanged,
    Event,
    FailureReport,
    NodeChanged,
    NodeState,
    RankChanged,
    RankState,
    lost_words,
)
from ddptui.core.monitor.cycles import CycleReport, MembershipChange, MembershipChanged
from ddptui.core.monitor.patterns import NAN_OR_INF
from ddptui.core.story.incident import Incident, IncidentKind, IncidentReport, ranks_words

# The verdict's signature -> the incident's kind (any other signature of a failed rank: crash).
SIGNATURE_KINDS = {
    "cuda_oom": IncidentKind.OUT_OF_MEMORY,
    "host_oom_killer": IncidentKind.OUT_OF_MEMORY,
    "nan_inf": IncidentKind.NON_FINITE,
    COLLECTIVE_MISMATCH: IncidentKind.COLLECTIVE_MISMATCH,
    "collective_timeout": IncidentKind.HANG,
    "node_lost": IncidentKind.NODE_LOST,
    "slurm_node_fail": IncidentKind.NODE_LOST,
    "slurm_preempted": IncidentKind.PREEMPTED,
    "slurm_time_limit": IncidentKind.PREEMPTED,
    "teardown": IncidentKind.OPERATOR,
}
# A launch failure the world check or the port check names is that kind however far the
# ranks got before it was found.
LAUNCH_KINDS = {
    "split_world": IncidentKind.LAUNCH_FAILED,
    "small_world": IncidentKind.LAUNCH_FAILED,
    "rdzv_port_taken": IncidentKind.REFUSED,
    "never_joined": IncidentKind.LAUNCH_FAILED,
    "launch_timeout": IncidentKind.LAUNCH_FAILED,
}
# The signals torchrun's agent handles (it stops its workers, then ends): a node's command
# ended by any other signal (SIGKILL, the kernel's OOM killer) lost its agent with no chance
# to stop them; the node helper stops what it left (core/node/reaper.py `orphans`).
AGENT_HANDLED = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})
LOST_KINDS = (IncidentKind.AGENT_LOST, IncidentKind.NODE_LOST)
# Verdicts that name no failure of their own: the rank's own words (its exception) say more.
PLAIN_SIGNATURES = frozenset({"exception"})
# Verdicts of a rank that ended without saying why: after a node was lost, that loss is why.
VAGUE_SIGNATURES = frozenset({"exit"})
# Kinds one rank's incidents may share: a verdict on a rank the audit or the stall already
# named is that incident judged, not a second one.
SAME_FINDING = {
    IncidentKind.HANG: {IncidentKind.HANG, IncidentKind.COLLECTIVE_MISMATCH},
    IncidentKind.COLLECTIVE_MISMATCH: {IncidentKind.COLLECTIVE_MISMATCH, IncidentKind.HANG},
}
# Incidents of the nodes' settings: a new rendezvous round runs with the same settings, so a
# restart does not end them (a later settings report does).
SETTINGS_KINDS = frozenset({IncidentKind.SETTINGS_DIFFER, IncidentKind.KNOWN_BAD_NCCL})
# What the lead is chosen among, in order, when no verdict was judged.
LEAD_ORDER = (
    lambda i: i.kind.failure and i.kind not in (IncidentKind.OPERATOR, IncidentKind.REFUSED),
    lambda i: i.kind in (IncidentKind.OPERATOR, IncidentKind.REFUSED),
    lambda i: not i.over,
    lambda i: True,
)


def said_aloud(event: Event) -> bool:
    """Whether the session says an event: a verdict not yet final is not (while a failure's
    story changes, its incidents tell it; the verdict is said once, at the end)."""
    return not (isinstance(event, VerdictReport) and not event.final)


def verdict_words(verdict: Verdict) -> str:
    """What a verdict says happened: a crash in its own words (the exception's line), a named
    failure in the catalogue's."""
    own = next((line for line in verdict.evidence if " " in line.strip()), "")
    return own if verdict.signature in PLAIN_SIGNATURES and own else verdict.summary


def killed_by(code: int) -> int | None:
    """The signal that ended a node's command: its exit code as Python gives it (-9) or as
    a shell or srun does (137, 128 + 9); None for an exit of its own."""
    if code < 0:
        return -code
    return code - 128 if 128 < code < 160 else None


def signal_name(number: int) -> str:
    """`SIGKILL` for 9; `signal 64` for a number with no name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def torchrun_time(text: str) -> float | None:
    """torchrun's failure time (`2026-11-26_04:21:49`, the node's local clock) in seconds."""
    try:
        return datetime.strptime(text, "%Y-%m-%d_%H:%M:%S").timestamp()
    except ValueError:
        return None


class Story:
    """The run's incidents as the session's events arrive; `seen` says what changed."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.incidents: list[Incident] = []
        self.round = 0
        self.ran = False  # a rank of the job ran (a refusal comes before any does)
        self._clock = clock
        self._node_of: dict[int, str] = {}
        self._failed: dict[int, str] = {}  # rank -> its node, for the ranks that failed
        self._failed_at: dict[tuple[str, int], float] = {}  # by torchrun's (the node's) clock
        self._judged: int | None = None  # the incident the verdict judged (its index)
        self._end_said = False  # the session said how it ended (a failed launch, the scheduler)
        self._keys: dict[tuple[object, ...], int] = {}
        self._wrong_seen: set[tuple[int, int | None, str]] = set()
        self._lasting: dict[tuple[object, ...], int] = {}  # settings' incidents, across rounds
        self._stopping: set[str] = set()  # nodes the session is stopping (their end is its)
        self._requeued = ""  # Slurm requeued the job: why its fresh torchrun's round began
        self._requeue_rounds: dict[int, str] = {}  # the rounds that began so, and that why

    # -- reading ---------------------------------------------------------------------------

    def lead(self) -> Incident | None:
        """The incident an operator reads first."""
        if self._judged is not None:
            return self.incidents[self._judged]
        for wanted in LEAD_ORDER:
            found = [i for i in self.incidents if wanted(i) and i.round == self.round]
            found = found or [i for i in self.incidents if wanted(i)]
            if found:
                return min(found, key=lambda i: (i.role != Role.INITIATING, i.began, i.number))
        return None

    def headline(self) -> str:
        lead = self.lead()
        return lead.headline() if lead else ""

    def told_first(self, ok: bool, detail: str) -> str:
        """A run's outcome `detail` with the lead on its first line: every surface opens with
        it (the console's outcome, the root-cause panel, history, headless)."""
        headline = self.headline()
        if not headline or headline in detail:
            return detail
        if ok:  # what the run finished as says it first (torchft's groups, an elastic job's)
            restarts = sum(i.kind == IncidentKind.RESTARTED for i in self.incidents)
            done = f"finished after {restarts} restart(s)" if restarts else "finished"
            return f"{detail}\n{headline}" if detail else f"{done}; {headline}"
        return f"{headline}\n{detail}" if detail else headline

    # -- writing ---------------------------------------------------------------------------

    def seen(self, event: Event) -> list[IncidentReport]:
        """The incidents an event began or changed, as reports to emit."""
        return self._stamped(self._seen(event))

    def retell(self, events: Iterable[Event]) -> list[Event]:
        """Events as a session says them: each one followed by the incidents it began or
        changed, a verdict only when it is final (`said_aloud`)."""
        out: list[Event] = []
        for event in events:
            told = self.seen(event)
            if said_aloud(event):
                out.append(event)
            out += told
        return out

    def _stamped(self, reports: list[IncidentReport]) -> list[IncidentReport]:
        """Each report with the lead as of now, its incident as it stands now."""
        if not reports:
            return reports  # the common case (a node's lines, a metric): no lead to work out
        lead = self.lead()
        number = lead.number if lead else 0
        return [
            IncidentReport(self.incidents[r.incident.number - 1], number, ts=r.ts) for r in reports
        ]

    def _seen(self, event: Event) -> list[IncidentReport]:
        match event:
            case RankChanged():
                return self._rank(event)
            case FailureReport(failure=record):
                began = torchrun_time(record.time)
                if began is not None:
                    self._failed_at.setdefault((record.node, record.local_rank), began)
                return []
            case MismatchReport(mismatch=mismatch):
                return self._mismatch(mismatch, event.ts)
            case StallReport():
                return self._stall(event)
            case FlightRecorderReport(suspects=suspects) if suspects:
                return self._found(
                    IncidentKind.HANG,
                    ("recorder",),
                    event.ts,
                    blamed=suspects,
                    summary=event.collectives[0] if event.collectives else "",
                    precise=bool(event.collectives),
                )
            case StragglerReport():
                return self._straggler(event)
            case SettingsReport():
                return self._settings(event)
            case VerdictReport(verdict=verdict):
                return self._verdict(verdict, event.ts)
            case CycleReport(cycle=cycle) if cycle.index > 0:
                return self._restart(event)
            case AllocationChanged(state="requeued", job_id=job, restarts=count) if count:
                self._requeued = f"Slurm requeued job {job} (restart {count})"
            case MembershipChanged(change=MembershipChange.LOST):
                kind, key = IncidentKind.AGENT_LOST, ("left", event.node)
                if ("node", event.node, self.round) in self._keys:
                    # its connection was lost: the same loss, told with the job going on
                    kind, key = IncidentKind.NODE_LOST, ("node", event.node)
                known = self._keys.get((*key, self.round))
                said = self.incidents[known].summary if known is not None else "its agent ended"
                return self._found(
                    kind,
                    key,
                    event.ts,
                    nodes=(event.node,),
                    summary=f"{said}; {event.detail}",
                    domain=Domain.INFRASTRUCTURE,
                    precise=True,
                    counts=False,  # the same loss, told by the membership: no repeat
                )
            case MembershipChanged(change=MembershipChange.KILLED | MembershipChange.DRAINED):
                known = self._keys.get(("left", event.node, self.round))
                if known is not None:  # its agent ended by the operator's hand, not lost
                    self._put(known, replace(self.incidents[known], kind=IncidentKind.OPERATOR))
                return self._found(
                    IncidentKind.OPERATOR,
                    ("left", event.node),
                    event.ts,
                    nodes=(event.node,),
                    summary=f"{event.change} by the operator",
                    domain=Domain.OPERATOR,
                    role=Role.TEARDOWN,
                )
            case NodeChanged(state=NodeState.STOPPING):
                self._stopping.add(event.node)
            case NodeChanged(state=NodeState.FAILED, exit_code=int(code)) if (
                killed_by(code) not in (None, *AGENT_HANDLED)
                and event.node not in self._stopping
                and not self._lost_besides(event.node)
            ):
                return self._found(
                    IncidentKind.AGENT_LOST,
                    ("left", event.node),
                    event.ts,
                    nodes=(event.node,),
                    summary=f"its torchrun agent was killed ({signal_name(killed_by(code) or 0)})",
                    domain=Domain.INFRASTRUCTURE,
                )
            case NodeChanged(state=NodeState.FAILED, detail=str(detail)) if lost_words(detail):
                return self._found(
                    IncidentKind.NODE_LOST,
                    ("node", event.node),
                    event.ts,
                    nodes=(event.node,),
                    summary=lost_words(detail) or "",
                    domain=Domain.INFRASTRUCTURE,
                    outlook=Outlook.RESTART_ELSEWHERE,
                )
        return []

    def _lost_besides(self, node: str) -> bool:
        """Whether a node other than `node` is lost in this round: a node killed after it
        was killed for it (srun ends a step's tasks when Slurm loses one of its nodes), not
        by a loss of its own."""
        return any(
            key[0] == "node" and key[1] != node and key[-1] == self.round for key in self._keys
        )

    def operator_stopped(self, detail: str = "") -> list[IncidentReport]:
        """The operator asked for the teardown while the job ran."""
        return self._stamped(
            self._found(
                IncidentKind.OPERATOR,
                ("operator",),
                self._clock(),
                summary=detail or "torn down by the operator",
                domain=Domain.OPERATOR,
                role=Role.TEARDOWN,
            )
        )

    def launch_failed(self, detail: str) -> list[IncidentReport]:
        """The launch failed, in the session's words: refused before any rank ran (a script
        missing, a port taken, Slurm refusing the allocation), or a world that could not
        form. It leads the story; no later verdict (a rank that "exited without saying why"
        because its agent was stopped) replaces it."""
        kind = IncidentKind.REFUSED if not self.ran else IncidentKind.LAUNCH_FAILED
        return self._session_end("launch", detail, LAUNCH_KINDS, kind, None, Outlook.FIX_FIRST)

    def scheduler_ended(self, detail: str) -> list[IncidentReport]:
        """The scheduler ended the job (preempted, its time limit, a node it lost): that
        leads; the ranks it stopped "exited without saying why" only because of it."""
        lost = lost_node(detail)
        return self._session_end(
            "scheduler", detail, SIGNATURE_KINDS, IncidentKind.PREEMPTED,
            Domain.INFRASTRUCTURE, Outlook.RESTART_HELPS, (lost,) if lost else (),
        )  # fmt: skip

    def _session_end(
        self,
        key: str,
        detail: str,
        kinds: dict[str, IncidentKind],
        kind: IncidentKind,
        domain: Domain | None,
        outlook: Outlook,
        nodes: tuple[str, ...] = (),
    ) -> list[IncidentReport]:
        """How the session says the run ended, in its words, as the lead: the kind its words'
        signature names in `kinds` (else `kind`), whose (`domain`, else the signature's), the
        outlook (the signature's, else `outlook`) and the `nodes` it names."""
        found = identify([detail], (), Source.NODE)
        signature = found[0] if found else None
        if signature is not None:
            kind = kinds.get(signature.name, kind)
            outlook = signature.outlook
        reports = self._found(
            kind,
            (key,),
            self._clock(),
            nodes=nodes,
            summary=detail.strip(),
            domain=domain or (signature.domain if signature else Domain.JOB),
            outlook=outlook,
        )
        self._judged = self._keys[(key, self.round)]
        self._end_said = True
        return self._stamped(reports)

    def ended(self) -> list[IncidentReport]:
        """The run is over: what still held (a stall, a straggler) is over with it."""
        reports = []
        for index, incident in enumerate(self.incidents):
            if not incident.over and incident.kind in (IncidentKind.STRAGGLER, IncidentKind.HANG):
                reports += self._put(index, replace(incident, over=True))
        return self._stamped(reports)

    # -- the kinds -------------------------------------------------------------------------

    def _rank(self, event: RankChanged) -> list[IncidentReport]:
        self.ran = self.ran or event.state in (RankState.RUNNING, RankState.DONE, RankState.HUNG)
        if event.rank is None:
            return []
        self._node_of[event.rank] = event.node
        if event.state == RankState.FAILED:
            self._failed[event.rank] = event.node
        wrong = next((d for d in event.diagnoses if d.kind == NAN_OR_INF), None)
        if wrong is None or (event.rank, wrong.seq, wrong.summary) in self._wrong_seen:
            return []  # a rank's events carry its diagnoses again: the same one is no repeat
        self._wrong_seen.add((event.rank, wrong.seq, wrong.summary))
        return self._found(
            IncidentKind.NON_FINITE,
            ("wrong", event.rank),
            wrong.ts or event.ts,
            blamed=(event.rank,),
            summary=wrong.summary,
            domain=Domain.JOB,
            outlook=Outlook.FIX_FIRST,
            evidence=(wrong.line,) if wrong.line else (),
        )

    def _mismatch(self, mismatch: CollectiveMismatch, ts: float) -> list[IncidentReport]:
        hang = mismatch.kind in (MismatchKind.SKIPPED, MismatchKind.DEADLOCK)
        kind = IncidentKind.HANG if hang else IncidentKind.COLLECTIVE_MISMATCH
        hurt = tuple(sorted(r for r in mismatch.ranks if r not in mismatch.culprits))
        return self._found(
            kind,
            ("skipped",) if hang else ("mismatch",),
            ts,
            blamed=mismatch.culprits,
            hurt=hurt,
            summary=f"{mismatch.describe()}: {mismatch.detail}".rstrip(": "),
            domain=Domain.JOB,
            outlook=Outlook.FIX_FIRST,
            evidence=(mismatch.detail,) if mismatch.detail else (),
            precise=bool(mismatch.culprits),
        )

    def _stall(self, event: StallReport) -> list[IncidentReport]:
        if event.deadlock:
            summary = "the process groups wait on each other (a deadlock)"
        elif event.suspects:
            summary = "no rank progresses; the stacks single out the suspect"
        else:
            summary = "no rank progresses"
        since = event.ts - event.since_s
        return self._found(
            IncidentKind.HANG,
            ("stall",),
            since,
            blamed=event.suspects,
            summary=summary,
            domain=Domain.JOB,
        )

    def _straggler(self, event: StragglerReport) -> list[IncidentReport]:
        key = ("straggler",)
        index = self._keys.get((*key, self.round))
        if not event.ranks:
            if index is None or self.incidents[index].over:
                return []
            return self._put(index, replace(self.incidents[index], over=True, last_seen=event.ts))
        if index is not None and self.incidents[index].over:
            del self._keys[(*key, self.round)]  # slow again after recovering: a new incident
        evidence = event.evidence[:1]
        return self._found(
            IncidentKind.STRAGGLER,
            key,
            event.ts,
            blamed=event.ranks,
            nodes=event.nodes,
            summary=evidence[0] if evidence else "slower than its peers: the others wait for it",
            domain=Domain.UNKNOWN,
            role=Role.INITIATING,
            replace_blame=True,
        )

    def _settings(self, event: SettingsReport) -> list[IncidentReport]:
        """Ranks that disagree on a setting (one incident, its words updated as more report),
        and a known-bad NCCL release (one incident)."""
        reports: list[IncidentReport] = []
        for key in list(self._lasting):  # told in an earlier round: the same incident still
            if not self.incidents[self._lasting[key]].over:
                self._keys[(*key, self.round)] = self._lasting[key]
        index = self._keys.get(("settings", self.round))
        differences = event.differences
        if differences:
            blamed = tuple(sorted({r for d in differences for r in d.ranks}))
            nodes = tuple(dict.fromkeys(n for d in differences for n in d.nodes))
            one = len({d.ranks for d in differences}) == 1  # the ranks named once, up front
            reports += self._found(
                IncidentKind.SETTINGS_DIFFER,
                ("settings",),
                event.ts,
                blamed=blamed,
                nodes=nodes,
                summary=differences_words(differences, there=one),
                domain=Domain.INFRASTRUCTURE,
                evidence=tuple(d.describe() for d in differences),
                replace_blame=True,
                precise=True,
                counts=False,
            )
        elif index is not None and not self.incidents[index].over:
            reports += self._put(index, replace(self.incidents[index], over=True))
        for bad in event.bad_nccl:
            who = () if bad.everywhere else bad.group.ranks
            reports += self._found(
                IncidentKind.KNOWN_BAD_NCCL,
                ("nccl", bad.version),
                event.ts,
                blamed=who,
                nodes=() if bad.everywhere else bad.group.nodes,
                summary=bad.describe(sources=False),
                domain=Domain.INFRASTRUCTURE,
                evidence=bad.advisory.sources,
                replace_blame=True,
                precise=True,
                counts=False,
            )
        for key in [("settings",), *(("nccl", b.version) for b in event.bad_nccl)]:
            if (*key, self.round) in self._keys:
                self._lasting[key] = self._keys[(*key, self.round)]
        return reports

    def _restart(self, event: CycleReport) -> list[IncidentReport]:
        cycle = event.cycle
        reports: list[IncidentReport] = []
        if cycle.index > self.round:
            for index, incident in enumerate(self.incidents):
                lasting = incident.kind in SETTINGS_KINDS  # the new round runs with them too
                if incident.round < cycle.index and not incident.over and not lasting:
                    reports += self._put(index, replace(incident, over=True))
            self.round = cycle.index
            if self._judged is not None:
                self._judged = None  # a new round: the story goes on
        why = cycle.cause if cycle.cause != "start" else "a failure"
        blamed = (cycle.failed_rank,) if cycle.failed_rank is not None else ()
        nodes = (cycle.failed_node,) if cycle.failed_node else ()
        if self._requeued and cycle.restarts == 0 and cycle.index not in self._requeue_rounds:
            self._requeue_rounds[cycle.index], self._requeued = self._requeued, ""
        if cycle.index in self._requeue_rounds:  # a fresh torchrun: the job runs again
            why, blamed, nodes = self._requeue_rounds[cycle.index], (), ()
        who = ranks_words(blamed, nodes) + " "
        why = why.removeprefix(who) if who.strip() else why  # the headline names them already
        # torchrun counts a restart on the failed worker's agent alone: said where it did
        count = f"; restart {cycle.restarts} of {cycle.max_restarts}" if cycle.restarts else ""
        reports += self._found(
            IncidentKind.RESTARTED,
            ("round", cycle.index),
            cycle.started,
            blamed=blamed,
            nodes=nodes,
            role=Role.CASCADE,
            summary=f"{why}{count}",
            counts=False,
        )
        return reports

    def _verdict(self, verdict: Verdict, ts: float) -> list[IncidentReport]:
        if self._end_said:  # that leads, whatever the ranks it stopped say
            return []
        lost = self._lost_for(verdict)
        if lost is not None:  # the ranks it took down or stopped say less than its loss
            self._judged = lost
            return []
        kind = SIGNATURE_KINDS.get(verdict.signature, IncidentKind.CRASH)
        if verdict.role == Role.TEARDOWN:
            kind = IncidentKind.OPERATOR
        blamed = (verdict.rank,) if verdict.rank is not None else ()
        hurt: tuple[int, ...] = ()
        audit_named = any(
            i.kind == IncidentKind.COLLECTIVE_MISMATCH and i.blamed for i in self.incidents
        )
        if kind == IncidentKind.COLLECTIVE_MISMATCH and not audit_named and blamed:
            # gloo aborts the rank that received the odd size, not the one that sent it: until
            # the audit names the odd rank, the aborted one is hurt, not blamed
            blamed, hurt = (), blamed
        nodes = (verdict.node,) if verdict.node and blamed else ()
        began = self._failed_at.get((verdict.node, verdict.local_rank or 0), ts)
        index = self._same_finding(kind, blamed)
        if index is not None:  # the audit's or the stall's incident, judged
            old = self.incidents[index]
            new = replace(
                old,
                blamed=old.blamed or blamed,
                hurt=old.hurt or hurt,
                nodes=old.nodes or nodes,
                domain=verdict.domain,
                outlook=verdict.outlook,
                evidence=old.evidence or verdict.evidence,
                last_seen=ts,
            )
            self._judged = index
            return self._put(index, new)
        index = self._keys.get(("verdict", self.round))
        if index is None:
            reports = self._found(kind, ("verdict",), began)
            index = self._keys[("verdict", self.round)]
        else:
            reports = []
        old = self.incidents[index]
        new = replace(
            old,
            kind=kind,
            summary=verdict_words(verdict),
            blamed=blamed,
            hurt=hurt,
            nodes=nodes,
            began=min(old.began, began),
            role=verdict.role,
            domain=verdict.domain,
            outlook=verdict.outlook,
            evidence=verdict.evidence,
            last_seen=ts,
        )
        self._judged = index
        changed = self._put(index, new)
        return changed if not reports else [IncidentReport(new, ts=reports[0].ts)]

    def _lost_for(self, verdict: Verdict) -> int | None:
        """The lost agent or node of this round that a verdict tells of: a rank on that node
        (its worker stopped with it), or one that failed because a peer went (a cascade), or
        one that ended without saying why. A rank's own failure elsewhere is its own story."""
        vague = verdict.role == Role.CASCADE or verdict.signature in VAGUE_SIGNATURES
        for index, incident in enumerate(self.incidents):
            if incident.kind not in LOST_KINDS or incident.round != self.round or incident.over:
                continue
            if vague or verdict.node in incident.nodes:
                return index
        return None

    # -- the one way an incident begins or changes -----------------------------------------

    def _same_finding(self, kind: IncidentKind, blamed: tuple[int, ...]) -> int | None:
        kinds = SAME_FINDING.get(kind, {kind})
        for index, incident in enumerate(self.incidents):
            if incident.kind not in kinds or incident.round != self.round or incident.over:
                continue
            if not blamed or not incident.blamed or set(blamed) & set(incident.blamed):
                return index
        return None

    def _found(
        self,
        kind: IncidentKind,
        key: tuple[object, ...],
        began: float,
        *,
        blamed: tuple[int, ...] = (),
        hurt: tuple[int, ...] = (),
        nodes: tuple[str, ...] = (),
        summary: str = "",
        role: Role = Role.INITIATING,
        domain: Domain = Domain.UNKNOWN,
        outlook: Outlook = Outlook.UNKNOWN,
        evidence: tuple[str, ...] = (),
        replace_blame: bool = False,
        precise: bool = False,
        counts: bool = True,
    ) -> list[IncidentReport]:
        """A finding: a new incident, or the one it repeats updated (blame, words, count).

        `replace_blame`: its ranks replace those blamed before (a straggler set changes);
        `precise`: its words replace the incident's (the audit's "rank 1 skipped all_reduce
        #6" says more than the stall's "no rank progresses"). Only the same detector's repeat
        counts as one: another detector confirming a finding is not a repeat."""
        now = self._clock()
        nodes = nodes or tuple(
            dict.fromkeys(self._node_of[r] for r in blamed if r in self._node_of)
        )
        index = self._keys.get((*key, self.round))
        repeat = index is not None
        if index is None and kind in SAME_FINDING:
            index = self._same_finding(kind, blamed)
        if index is None:
            if kind in (IncidentKind.COLLECTIVE_MISMATCH, IncidentKind.HANG) and not blamed:
                hurt = hurt or tuple(sorted(self._failed))
            incident = Incident(
                len(self.incidents) + 1,
                kind,
                summary,
                blamed,
                hurt,
                nodes,
                began,
                now,
                role=role,
                domain=domain,
                outlook=outlook,
                evidence=evidence,
                round=self.round,
            )
            self.incidents.append(incident)
            self._keys[(*key, self.round)] = len(self.incidents) - 1
            return [IncidentReport(incident, ts=now)]
        old = self.incidents[index]
        self._keys[(*key, self.round)] = index
        named = blamed if (replace_blame or not old.blamed) and blamed else old.blamed
        new = replace(
            old,
            blamed=named,
            hurt=old.hurt or hurt,
            nodes=nodes if named != old.blamed else (old.nodes or nodes),
            summary=summary
            if summary and (precise or named != old.blamed or not old.summary)
            else old.summary,
            evidence=evidence if precise and evidence else (old.evidence or evidence),
            count=old.count + (counts and repeat and named == old.blamed),
            last_seen=now,
        )
        return self._put(index, new)

    def _put(self, index: int, new: Incident) -> list[IncidentReport]:
        """Keep the change; say it only if more than its count and last sight changed."""
        old = self.incidents[index]
        self.incidents[index] = new
        if replace(old, count=new.count, last_seen=new.last_seen) == new:
            return []
        return [IncidentReport(new, ts=self._clock())]
