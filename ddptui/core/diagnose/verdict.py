"""Provides the one verdict on a failure: culprit rank and node, role, domain, outlook, evidence.

It builds on what the monitor decided: the failure story (`ddptui.core.diagnose.failures`)
names the culprit and each rank's cause, the monitor's recogniser gives each rank's kinds.
The verdict adds what those cannot see: a node-level signature (Slurm, the kernel log, a lost
node) moves the blame to that node, since its ranks' deaths and their peers' errors follow
from it; a collective mismatch found by the audit moves it to the odd rank (gloo aborts the
rank that received the wrong size, not the one that sent it).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.core.diagnose.audit import CollectiveMismatch, MismatchKind
from ddptui.core.diagnose.signatures import (
    BY_NAME,
    CASCADE_CAUSES,
    COLLECTIVE_MISMATCH,
    KILLED_CAUSE,
    TEARDOWN_CAUSE,
    TRACEBACK,
    Domain,
    Outlook,
    Signature,
    Source,
    identify,
    lost_node,
)
from ddptui.core.events import Event, RankSummary

MAX_EVIDENCE = 6


class Role(enum.StrEnum):
    """A failed rank's part in the failure."""

    INITIATING = "initiating"  # it failed first, on its own
    CASCADE = "cascade"  # it failed because another rank (or node) did
    TEARDOWN = "teardown"  # the operator's teardown stopped it


@dataclass(frozen=True)
class RankFacts:
    """What the monitor knows of one rank, as the verdict needs it.

    `cause` and `culprit` are the failure story's (`failures.cause_of`, `failures.culprit`);
    `kinds` those of the rank's `Diagnosis` lines; `lines` its error, traceback and last lines.
    """

    node: str
    local_rank: int
    rank: int | None = None
    cause: str = ""  # "" when the rank did not fail
    culprit: bool = False
    kinds: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    exit_code: int | None = None


@dataclass(frozen=True)
class Verdict:
    """The failure, once: who, its role, whose failure it is, whether to restart, and why."""

    node: str
    rank: int | None
    local_rank: int | None
    role: Role
    signature: str
    domain: Domain
    outlook: Outlook
    summary: str
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": "verdict",
            "node": self.node,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "role": str(self.role),
            "signature": self.signature,
            "domain": str(self.domain),
            "outlook": str(self.outlook),
            "summary": self.summary,
            "evidence": list(self.evidence),
        }


@dataclass(frozen=True)
class VerdictReport(Event):
    """The verdict, said when a failure's story changes and at the end of a failed run. The
    headless contract: `{"event": "verdict", "ts", "node", "rank", "local_rank", "role":
    "initiating"|"cascade"|"teardown", "signature", "domain": "job"|"infrastructure"|
    "unknown", "outlook": "restart_helps"|"restart_elsewhere"|"fix_first"|"unknown",
    "summary", "evidence": [lines], "final": bool}`."""

    verdict: Verdict
    final: bool = False  # the run has ended: this is its verdict

    kind = "verdict"

    def to_dict(self) -> dict[str, Any]:
        return {**self.verdict.to_dict(), "ts": self.ts, "final": self.final}


def role_of(facts: RankFacts, culprit: RankFacts | None) -> Role:
    """A rank's role: the teardown's, the culprit's (initiating), or a cascade."""
    if facts.cause == TEARDOWN_CAUSE:
        return Role.TEARDOWN
    if culprit is not None and (facts.node, facts.local_rank) == (
        culprit.node,
        culprit.local_rank,
    ):
        return Role.INITIATING
    return Role.CASCADE


def roles(ranks: Sequence[RankFacts], verdict: Verdict | None) -> dict[tuple[str, int], Role]:
    """Each failed rank's role once the verdict is in: the rank it names has the verdict's
    role, the teardown's are the teardown's, every other failed rank is a cascade."""
    named = (verdict.node, verdict.local_rank) if verdict is not None else None
    out = {}
    for facts in ranks:
        if not facts.cause:
            continue
        key = (facts.node, facts.local_rank)
        if facts.cause == TEARDOWN_CAUSE:
            out[key] = Role.TEARDOWN
        elif verdict is not None and key == named:
            out[key] = verdict.role
        else:
            out[key] = Role.CASCADE
    return out


def _evidence(first: str, lines: Sequence[str]) -> tuple[str, ...]:
    rest = [line.strip() for line in lines if line.strip() and line.strip() != first]
    return (first, *rest[: MAX_EVIDENCE - 1])


def _on_node(ranks: Sequence[RankFacts], node: str) -> RankFacts | None:
    """The rank to name on a node: the story's culprit, else its first failed rank."""
    here = [r for r in ranks if r.node == node]
    failed = [r for r in here if r.cause and r.cause != TEARDOWN_CAUSE]
    return next((r for r in here if r.culprit), None) or min(
        failed or here, key=lambda r: r.local_rank, default=None
    )


def _verdict(
    facts: RankFacts | None,
    node: str,
    signature: Signature,
    evidence: tuple[str, ...],
    summary: str = "",
    role: Role = Role.INITIATING,
) -> Verdict:
    return Verdict(
        node,
        facts.rank if facts else None,
        facts.local_rank if facts else None,
        role,
        signature.name,
        signature.domain,
        signature.outlook,
        summary or signature.summary,
        evidence,
    )


def judge(
    ranks: Sequence[RankFacts],
    node_lines: Mapping[str, Sequence[str]] | None = None,
    mismatches: Sequence[CollectiveMismatch] = (),
    node_kinds: Mapping[str, Iterable[str]] | None = None,
) -> Verdict | None:
    """The verdict on a run's failure, or None when no rank failed and nothing else says so.

    In order: a node-level signature (the scheduler, the kernel, a lost node) names that
    node; a collective mismatch with an odd rank names that rank; a deadlock between groups
    names no rank; else the failure story's culprit, its failure named by the first
    signature its lines or kinds show.

    `node_lines` are each node's own lines (its kernel log, srun's and slurmstepd's words, the
    connection's), `node_kinds` what the session knows of a node (`node_lost`).
    """
    node_lines, node_kinds = node_lines or {}, node_kinds or {}
    for node in dict.fromkeys([*node_lines, *node_kinds]):
        lines = node_lines.get(node, ())
        found = identify(lines, node_kinds.get(node, ()), Source.NODE)
        if found is not None:
            signature, line = found
            facts = _on_node(ranks, node)
            return _verdict(facts, node, signature, _evidence(line, lines))
    blamed = next((m for m in mismatches if m.culprits), None)
    if blamed is not None:
        facts = next((r for r in ranks if r.rank == blamed.culprits[0]), None)
        lines = (blamed.describe(), blamed.detail, *(facts.lines if facts else ()))
        return _verdict(
            facts,
            facts.node if facts else "",
            BY_NAME[COLLECTIVE_MISMATCH],
            _evidence(lines[0], lines[1:]),
            f"{blamed.describe()}: {blamed.detail}",
        )
    deadlocks = [m for m in mismatches if m.kind == MismatchKind.DEADLOCK]
    if deadlocks:
        lines = tuple(f"{m.describe()}: {m.detail}" for m in deadlocks)
        return Verdict(
            "",
            None,
            None,
            Role.INITIATING,
            COLLECTIVE_MISMATCH,
            Domain.JOB,
            Outlook.FIX_FIRST,
            "the process groups wait on each other (a deadlock): the ranks issue their groups'"
            " collectives in different orders",
            lines[:MAX_EVIDENCE],
        )
    failed = [r for r in ranks if r.cause]
    culprit = next((r for r in failed if r.culprit), None) or next(
        (r for r in failed if r.cause not in CASCADE_CAUSES and r.cause != TEARDOWN_CAUSE),
        failed[0] if failed else None,
    )
    if culprit is None:
        return None
    return _rank_verdict(culprit, Role.INITIATING)


def _rank_verdict(facts: RankFacts, role: Role) -> Verdict:
    if facts.cause == TEARDOWN_CAUSE:
        return Verdict(
            facts.node,
            facts.rank,
            facts.local_rank,
            Role.TEARDOWN,
            "teardown",
            Domain.UNKNOWN,
            Outlook.UNKNOWN,
            "stopped by the operator's teardown",
            facts.lines[-1:],
        )
    kinds = set(facts.kinds) | {facts.cause}
    if facts.cause in CASCADE_CAUSES:
        kinds.discard(TRACEBACK)  # its traceback tells of the peer, not of its own code
    found = identify(facts.lines, kinds)
    if found is not None:
        signature, line = found
        summary = signature.summary
        if signature.name == COLLECTIVE_MISMATCH and "Received data size" in line:
            summary += (
                ": gloo aborts the rank that received the odd size, so the odd rank may be "
                "its peer (the collective audit names it)"
            )
        if signature.cascade and role == Role.INITIATING:
            role = Role.CASCADE  # the culprit left no trace of its own: a peer's symptom
        return _verdict(facts, facts.node, signature, _evidence(line, facts.lines), summary, role)
    killed = facts.cause == KILLED_CAUSE
    return Verdict(
        facts.node,
        facts.rank,
        facts.local_rank,
        role,
        "killed" if killed else "exit",
        Domain.UNKNOWN,
        Outlook.UNKNOWN,
        (
            "killed by a signal it did not ask for: the host OOM killer or the scheduler? "
            "(the node's kernel log says)"
            if killed
            else f"exited ({facts.exit_code}) without saying why"
        ),
        tuple(line.strip() for line in facts.lines[-MAX_EVIDENCE:] if line.strip()),
    )


def scheduler_verdict(words: str, ranks: Sequence[RankSummary]) -> Verdict | None:
    """The verdict of a job the scheduler ended (signatures.scheduler_end's `words`): the
    scheduler's, not that of a rank it stopped; on the node it says it lost (its first rank),
    or on none (a preemption, the time limit end every node alike). None when the words name
    no signature."""
    found = identify([words], (), Source.NODE)
    if found is None:
        return None
    signature, line = found
    node = lost_node(words)
    cell = next((r for r in ranks if r.node == node), None) if node else None
    return Verdict(
        node or "",
        cell.rank if cell else None,
        cell.local_rank if cell else None,
        Role.INITIATING,
        signature.name,
        signature.domain,
        signature.outlook,
        words,
        (line,),
    )
