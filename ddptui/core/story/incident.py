"""Provides Incident: one finding of a run (what, who it blames and hurts, since when, why)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ddptui.core.diagnose.signatures import Domain, Outlook
from ddptui.core.diagnose.verdict import Role
from ddptui.core.events import Event, plain


class IncidentKind(enum.StrEnum):
    """What happened, as an operator names it."""

    CRASH = "crash"
    OUT_OF_MEMORY = "out_of_memory"
    HANG = "hang"  # no progress: a rank skipped a collective, or the groups deadlocked
    COLLECTIVE_MISMATCH = "collective_mismatch"
    STRAGGLER = "straggler"
    NON_FINITE = "non_finite"  # a metric went NaN or Inf
    NODE_LOST = "node_lost"
    AGENT_LOST = "agent_lost"
    PREEMPTED = "preempted"  # the scheduler ended the job (preemption, its time limit)
    OPERATOR = "operator_stop"
    REFUSED = "refused"  # refused before launch: nothing ran
    LAUNCH_FAILED = "launch_failed"  # the world could not form (a node apart, too few)
    RESTARTED = "restarted"  # a new rendezvous round began after a failure
    SETTINGS_DIFFER = "settings_differ"  # ranks see other versions or NCCL_*/GLOO_* settings
    KNOWN_BAD_NCCL = "known_bad_nccl"  # ranks run an NCCL release with a known hang or corruption

    @property
    def words(self) -> str:
        return KIND_WORDS[self]

    @property
    def failure(self) -> bool:
        """Ends or stops the job when it is the lead (a straggler, a restart or a setting does
        not: they warn)."""
        return self not in WARNINGS


KIND_WORDS = {
    IncidentKind.CRASH: "crash",
    IncidentKind.OUT_OF_MEMORY: "out of memory",
    IncidentKind.HANG: "hang",
    IncidentKind.COLLECTIVE_MISMATCH: "collective mismatch",
    IncidentKind.STRAGGLER: "straggler",
    IncidentKind.NON_FINITE: "non-finite metric",
    IncidentKind.NODE_LOST: "node lost",
    IncidentKind.AGENT_LOST: "agent lost",
    IncidentKind.PREEMPTED: "ended by the scheduler",
    IncidentKind.OPERATOR: "stopped by the operator",
    IncidentKind.REFUSED: "refused before launch",
    IncidentKind.LAUNCH_FAILED: "launch failed",
    IncidentKind.RESTARTED: "restarted",
    IncidentKind.SETTINGS_DIFFER: "settings differ",
    IncidentKind.KNOWN_BAD_NCCL: "known-bad NCCL",
}
WARNINGS = frozenset(
    {
        IncidentKind.STRAGGLER,
        IncidentKind.RESTARTED,
        IncidentKind.SETTINGS_DIFFER,
        IncidentKind.KNOWN_BAD_NCCL,
    }
)

OUTLOOK_WORDS = {
    Outlook.FIX_FIRST: "fix it first: a restart fails the same way",
    Outlook.RESTART_HELPS: "a restart may get past it",
    Outlook.RESTART_ELSEWHERE: "restart without that node",
    Outlook.UNKNOWN: "",
}


def ranks_words(ranks: tuple[int, ...], nodes: tuple[str, ...] = ()) -> str:
    """`rank 1 on node1`, `ranks 2, 3 on node2`, `node node3`, or "" when nobody is named."""
    where = f" on {', '.join(nodes)}" if nodes else ""
    if len(ranks) == 1:
        return f"rank {ranks[0]}{where}"
    if ranks:
        return f"ranks {', '.join(map(str, ranks))}{where}"
    return f"node {', '.join(nodes)}" if nodes else ""


@dataclass(frozen=True)
class Incident:
    """One finding, updated while it lasts (`count`, `last_seen`), never said again as new.

    `blamed` are the ranks it starts with, `hurt` those it stopped or slowed; `began` is when
    it began by the ranks' own clocks where they tell it (a failure's time in torchrun's
    summary), else when the console saw it; `round` the rendezvous round it happened in; `over`
    says it no longer holds (a straggler recovered, a round replaced by the next)."""

    number: int
    kind: IncidentKind
    summary: str
    blamed: tuple[int, ...] = ()
    hurt: tuple[int, ...] = ()
    nodes: tuple[str, ...] = ()
    began: float = 0.0
    last_seen: float = 0.0
    count: int = 1
    role: Role = Role.INITIATING
    domain: Domain = Domain.UNKNOWN
    outlook: Outlook = Outlook.UNKNOWN
    evidence: tuple[str, ...] = ()
    round: int = 0
    over: bool = False

    @property
    def who(self) -> str:
        return ranks_words(self.blamed, self.nodes)

    def marks(self, node: str, rank: int | None) -> bool:
        """Whether a rank is one this incident blames: one of its ranks, or, for a node or
        an agent lost that names no rank (Slurm's word on a node, a cut connection), a rank
        of that node."""
        if self.blamed:
            return rank is not None and rank in self.blamed
        lost = self.kind in (IncidentKind.NODE_LOST, IncidentKind.AGENT_LOST)
        return lost and node in self.nodes

    def headline(self) -> str:
        """The one line every surface opens with: `collective mismatch: rank 1 on node1 —
        size mismatch in all_reduce #6 of group 0; fix it first: a restart fails the same way`."""
        head = self.kind.words + (f": {self.who}" if self.who else "")
        body = self.summary
        advice = OUTLOOK_WORDS[self.outlook]
        if advice and advice not in body:
            body = f"{body}; {advice}" if body else advice
        if self.count > 1:
            body += f" (seen {self.count} times)"
        return f"{head} — {body}" if body else head

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = plain(self)
        data["headline"] = self.headline()
        return data


@dataclass(frozen=True)
class IncidentReport(Event):
    """An incident began, or changed what it says (its blame, its words, over): `{"event":
    "incident", "ts", "number", "kind", "summary", "blamed", "hurt", "nodes", "began",
    "last_seen", "count", "role", "domain", "outlook", "evidence", "round", "over",
    "headline", "lead"}`; `lead` is the number of the story's lead incident as of this report
    (the one every surface opens with). A repeat of the same finding only counts: it is not
    said again."""

    incident: Incident
    lead: int = 0

    kind = "incident"
    followed = True

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.kind, "ts": self.ts, **self.incident.to_dict(), "lead": self.lead}
