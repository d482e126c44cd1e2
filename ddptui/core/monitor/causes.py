"""Provides a rank's cause of failure: what its end says (its exit code, its error, the kinds
of trouble its lines showed), in the words the summary's per-rank `cause` uses.

This is reading, not judging: one rank's end, on its own. Which failure came first and
which followed it (the culprit and its victims) is diagnose's (core/diagnose/failures.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ddptui.core.events import FailureRecord
from ddptui.core.monitor.patterns import (
    COLLECTIVE_TIMEOUT,
    CUDA_OOM,
    DUPLICATE_GPU,
    NAN_OR_INF,
    PEER_LOST,
    TRACEBACK,
)

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


def is_victim(cause: str) -> bool:
    """A failure another one caused (or the teardown did): never the culprit if one is not."""
    return cause in VICTIM_CAUSES


def record_cause(record: FailureRecord) -> str:
    return cause_of(record.exit_code, record.error or " ".join(record.traceback[-1:]))


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
