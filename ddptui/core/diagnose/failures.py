"""Provides the failure story: each failure's cause, culprit or victim, the order, jump targets.

One module answers "is this failure a consequence of another": the monitor asks it when a
failure arrives and when the run ends, the console draws what it says. A failure is a
*victim* when its cause says another rank went first (stopped by the launcher after a peer
failed, a peer closed the connection, a collective waited for a peer, the operator's
teardown); the *culprit* is the first observed failure that is not a victim, else the first
observed failure. Exactly one failure is the culprit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ddptui.core.diagnose.patterns import (
    COLLECTIVE_TIMEOUT,
    CUDA_OOM,
    DUPLICATE_GPU,
    HUNG,
    NAN_OR_INF,
    PEER_LOST,
    STRAGGLER,
    TRACEBACK,
)
from ddptui.core.events import Diagnosis, FailureRecord, RankChanged

# What a rank's failure was, as the summary's per-rank `cause` says it.
EXCEPTION = "exception"  # its own Python exception
OOM = "cuda_oom"
SHARED_GPU = DUPLICATE_GPU  # two ranks on one GPU: NCCL refuses the communicator
WATCHDOG = "watchdog_timeout"  # a collective timed out (the NCCL watchdog's SIGABRT)
STOPPED = "stopped_by_launcher"  # SIGTERM from its agent (or srun) after a peer failed
PEER = "peer_closed"  # a peer closed the connection: another rank went first
IN_COLLECTIVE = "waiting_in_collective"  # stuck in a collective a peer never entered
TEARDOWN = "stopped_by_teardown"  # the operator's teardown, not a failure of the job
KILLED = "signal"  # killed by a signal it did not ask for (SIGKILL: the OOM killer, ...)
EXIT = "exit"  # exited with a code and said nothing more
AGENT_GONE = "agent_exited"  # its node's agent ended before it reported
SUSPECT = "stall_suspect"  # the stall's odd one out: its stack differs from the others'
DEADLOCK = "deadlock"  # in a stall whose groups wait on each other in different collectives
STALLED = "stalled"  # silent in a stall, neither the suspect nor in a collective
MISMATCH = "collective_mismatch"  # the collective audit's odd rank: the others' failures follow
WRONG_NUMBERS = NAN_OR_INF  # its loss went NaN or Inf before it failed: the numbers broke first
VICTIM_CAUSES = frozenset({STOPPED, PEER, IN_COLLECTIVE, TEARDOWN, AGENT_GONE, WATCHDOG, STALLED})

_PEER_WORDS = re.compile(
    r"Connection closed by peer|remote worker crash|Connection reset by peer|"
    r"NCCL communicator was aborted|Broken pipe|SignalException|Failed to recv, got 0 bytes"
)
_STOP_SIGNALS = frozenset({-15, -2, -1, 143, 130, 129})  # SIGTERM, SIGINT, SIGHUP


def cause_of(
    exit_code: int | None,
    error: str = "",
    kinds: Iterable[str] = (),
    *,
    teardown: bool = False,
) -> str:
    """Why a rank ended: the first rule that fits, from the operator's teardown down."""
    kinds = set(kinds)
    if teardown:
        return TEARDOWN
    if CUDA_OOM in kinds or "CUDA out of memory" in error:
        return OOM
    if DUPLICATE_GPU in kinds or "Duplicate GPU detected" in error:
        return SHARED_GPU
    if _PEER_WORDS.search(error):
        return PEER
    if COLLECTIVE_TIMEOUT in kinds:
        return WATCHDOG
    if exit_code in _STOP_SIGNALS:
        return STOPPED
    if NAN_OR_INF in kinds:
        return WRONG_NUMBERS
    if error or TRACEBACK in kinds:
        return EXCEPTION
    if PEER_LOST in kinds:
        return PEER
    if exit_code is None:
        return AGENT_GONE
    if exit_code < 0 or exit_code > 128:
        return KILLED
    return EXIT


def explanation(cause: str, diagnoses: Iterable[Diagnosis]) -> str:
    """The words that explain a failure better than its exception line, if its output had
    them (two ranks on one GPU: NCCL says only `invalid usage` in the exception)."""
    if cause == SHARED_GPU:
        return next((d.summary for d in diagnoses if d.kind == DUPLICATE_GPU), "")
    return ""


def is_victim(cause: str) -> bool:
    """A failure another one caused (or the teardown did): never the culprit if one is not."""
    return cause in VICTIM_CAUSES


def record_cause(record: FailureRecord) -> str:
    return cause_of(record.exit_code, record.error or " ".join(record.traceback[-1:]))


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


@dataclass(frozen=True)
class FailedRank:
    """What the story needs of a failed rank: where, how, and when it was seen to fail."""

    node: str
    local_rank: int
    rank: int | None
    exit_code: int | None
    error: str
    cause: str
    order: int  # the monitor's count of failures when this one came: observation order


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
