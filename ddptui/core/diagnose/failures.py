"""Provides the failure story: each failure's cause, culprit or victim, the order, jump targets.

One module answers "is this failure a consequence of another": JobWatch asks it when a
failure arrives and when the run ends, the console draws what it says (each rank's cause on
its own is the monitor's reading: core/monitor/causes.py). A failure is a
*victim* when its cause says another rank went first (stopped by the launcher after a peer
failed, a peer closed the connection, a collective waited for a peer, the operator's
teardown); the *culprit* is the first observed failure that is not a victim, else the first
observed failure. Exactly one failure is the culprit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ddptui.core.events import (
    Diagnosis,
    FailureRecord,
    FailureReport,
    RankChanged,
    RankState,
    RankSummary,
)
from ddptui.core.monitor.board import RankBoard
from ddptui.core.monitor.causes import (
    MISMATCH,
    SHARED_GPU,
    TEARDOWN,
    FailedRank,
    is_victim,
    record_cause,
)
from ddptui.core.monitor.patterns import (
    COLLECTIVE_TIMEOUT,
    DUPLICATE_GPU,
    HUNG,
    PEER_LOST,
    STRAGGLER,
)
from ddptui.core.monitor.rank_cell import RankCell


def explanation(cause: str, diagnoses: Iterable[Diagnosis]) -> str:
    """The words that explain a failure better than its exception line, if its output had
    them (two ranks on one GPU: NCCL says only `invalid usage` in the exception)."""
    if cause == SHARED_GPU:
        return next((d.summary for d in diagnoses if d.kind == DUPLICATE_GPU), "")
    return ""


def order_failures(records: Sequence[FailureRecord], final: bool = True) -> list[FailureRecord]:
    """The culprit first, then the victims; each group by time, arrival order on ties.

    torchrun's time has second resolution and each node's agent names its own first failure,
    so the agent's "first observed" mark breaks a tie within one second. The result marks
    exactly one record `root_cause` (the first), and each carries its `cause`. While the run
    goes on (`final` False) a victim is not named the culprit: the culprit may still come.
    """

    def key(item: tuple[int, FailureRecord]) -> tuple[bool, bool, str, bool, int]:
        index, record = item
        odd = record.cause == MISMATCH  # the audit's odd rank, whoever gloo aborted first
        return (not odd, is_victim(record.cause), record.time, not record.first_on_node, index)

    decided = [r if r.cause else replace(r, cause=record_cause(r)) for r in records]
    ordered = [record for _, record in sorted(enumerate(decided), key=key)]
    named = bool(ordered) and ordered[0].cause != TEARDOWN
    named = named and (final or not is_victim(ordered[0].cause))
    return [replace(r, root_cause=named and i == 0) for i, r in enumerate(ordered)]


def culprit(
    ranks: Sequence[FailedRank], failures: Sequence[FailureRecord] = ()
) -> FailedRank | None:
    """The rank that failed first on its own; torchrun's ordered summary wins where it has one."""
    if failures and failures[0].root_cause:
        first = failures[0]
        named = [r for r in ranks if (r.node, r.local_rank) == (first.node, first.local_rank)]
        if named:
            return named[0]
    observed = sorted(
        (r for r in ranks if r.cause != TEARDOWN), key=lambda r: (r.cause != MISMATCH, r.order)
    )
    return next((r for r in observed if not is_victim(r.cause)), observed[0] if observed else None)


@dataclass(frozen=True)
class JumpTarget:
    """A rank's first error line: its node, its line number there, and what it says."""

    node: str
    local_rank: int
    rank: int | None
    seq: int
    summary: str
    ts: float = 0.0


def first_error(diagnoses: Sequence[Diagnosis]) -> Diagnosis | None:
    """The earliest line of a rank's output (or its agent's) that reports trouble."""
    lines = [d for d in diagnoses if d.seq is not None and d.kind not in (HUNG, STRAGGLER)]
    return min(lines, key=lambda d: d.seq or 0) if lines else None


def _target(event: RankChanged) -> JumpTarget | None:
    first = first_error(event.diagnoses)
    if first is None or first.seq is None:
        return None
    return JumpTarget(event.node, event.local_rank, event.rank, first.seq, first.summary, first.ts)


def jump_targets(
    ranks: Mapping[tuple[str, int], RankChanged], failures: Sequence[FailureRecord]
) -> list[JumpTarget]:
    """Ranks with an error line, in the order an operator wants them.

    1. the ordered failures' ranks that are not victims (the culprit first);
    2. ranks whose own error came but no failure record yet (its agent has not reported it:
       another node's agent may have reported its victims first), by time;
    3. the victims' records, in their order;
    4. the others (a rank can report a lost peer or a timeout and still run, or be
       restarted), by when their first error line came. Ties in grid order.
    """
    recorded: list[tuple[str, int]] = []
    for record in failures:
        key = (record.node, record.local_rank)
        if key not in recorded:
            recorded.append(key)
    victims = {(r.node, r.local_rank) for r in failures if is_victim(r.cause)}
    unrecorded = sorted(
        (lost_a_peer(event.diagnoses), target.ts, index, key)
        for index, (key, event) in enumerate(ranks.items())
        if key not in recorded and (target := _target(event)) is not None
    )
    order = [key for key in recorded if key not in victims]
    order += [key for lost, *_, key in unrecorded if not lost]
    order += [key for key in recorded if key in victims]
    order += [key for lost, *_, key in unrecorded if lost]
    return [t for key in order if key in ranks and (t := _target(ranks[key]))]


def lost_a_peer(diagnoses: Iterable[Diagnosis]) -> bool:
    """A rank's output says a peer went away or a collective timed out: likely a victim."""
    return any(d.kind in (PEER_LOST, COLLECTIVE_TIMEOUT) for d in diagnoses)


# -- the story over the rank board ------------------------------------------------------------


def _audited(board: RankBoard, records: Sequence[FailureRecord]) -> list[FailureRecord]:
    """The records, the collective audit's odd ranks' with its cause (they come first)."""
    odd = {(c.node, c.local_rank) for c in board.all_cells() if c.known_cause == MISMATCH}
    return [replace(r, cause=MISMATCH) if (r.node, r.local_rank) in odd else r for r in records]


def failure_report(board: RankBoard, record: FailureRecord) -> FailureReport:
    """A failure as it arrives, with the story so far (no victim named the culprit yet)."""
    ordered = order_failures(_audited(board, board.failures), final=False)
    told = next(r for r in ordered if (r.node, r.local_rank) == (record.node, record.local_rank))
    return FailureReport(told, tuple(ordered))


def ordered_failures(board: RankBoard) -> list[FailureRecord]:
    """torchrun's failure records as the story tells them at the end: the culprit first."""
    return order_failures(_audited(board, board.failures))


def culprit_cell(board: RankBoard) -> RankCell | None:
    """The rank the failure story starts with (the summary and the history name it): the
    collective audit's odd rank, else the first failure of its own."""
    odd = [c for c in board.all_cells() if c.known_cause == MISMATCH]
    if odd:
        return odd[0]
    failed = [c.failed() for c in board.all_cells() if c.state == RankState.FAILED]
    first = culprit(failed, ordered_failures(board))
    if first is None:  # nothing failed: a stall's lone suspect, if the teardown ended it
        odd = [c for c in board.all_cells() if c.suspect and c.state == RankState.STOPPED]
        return odd[0] if len(odd) == 1 else None
    return board.cell(first.node, first.local_rank)


def rank_summaries(board: RankBoard) -> list[RankSummary]:
    """Every rank's outcome, the culprit marked."""
    first = culprit_cell(board)
    return [c.summary(culprit=c is first) for c in board.all_cells()]
