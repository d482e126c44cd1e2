"""Provides RankCell: one rank's state, diagnoses, traceback and progress, as monitored."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ddptui.core.events import Diagnosis, RankChanged, RankState, RankSummary
from ddptui.core.monitor.causes import MISMATCH, TEARDOWN, WATCHDOG, FailedRank, cause_of
from ddptui.core.monitor.patterns import COLLECTIVE_TIMEOUT, TRACEBACK, StepRate

TRACEBACK_START = "Traceback (most recent call last):"
_TRACE_START = re.compile(re.escape(TRACEBACK_START))
_TORCH_RANK_TAG = re.compile(r"^\[rank\d+\]: ?")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::(?: |$)|$)")  # `ValueError: x`
MAX_TRACEBACK = 60
MAX_DIAGNOSES = 8
LAST_LINES = 6  # a rank's last lines, kept for the error of a rank that left no traceback


@dataclass
class RankCell:
    """One (node, local rank) position of the grid."""

    node: str
    local_rank: int
    rank: int | None = None
    state: RankState = RankState.PENDING
    exit_code: int | None = None
    error: str = ""
    traceback: list[str] = field(default_factory=list)
    last_output: float = 0.0
    lines: int = 0
    restarts: int = 0
    rounds: int = (
        0  # the rendezvous rounds it was given a rank in (a restart is each after the first)
    )
    diagnoses: list[Diagnosis] = field(default_factory=list)
    straggler: bool = False
    progress: StepRate = field(default_factory=StepRate)
    failed_order: int | None = None  # the board's count of failures when this one failed
    known_cause: str = ""  # set when the cause is known outright (teardown, launcher's stop)
    stall_cause: str = ""  # what the stall's stacks said of it (suspect, in a collective)
    suspect: bool = False
    last_lines: deque[str] = field(default_factory=lambda: deque(maxlen=LAST_LINES))
    _collecting: bool = False
    _trace_seq: int | None = None

    @property
    def cause(self) -> str:
        """Why this rank ended, if it failed or the teardown stopped it, else "" (the
        collective audit's odd rank: `collective_mismatch`, whatever its end)."""
        if self.known_cause == MISMATCH:
            return MISMATCH
        if self.state == RankState.DONE:
            return "finished"
        if self.state == RankState.STOPPED and self.timed_out:
            return WATCHDOG  # its collective timed out before the teardown stopped it
        if self.stall_cause and self.known_cause in ("", TEARDOWN):
            return self.stall_cause  # a stalled rank the teardown stopped: what the stall said
        if self.state == RankState.STOPPED:
            return TEARDOWN
        if self.state != RankState.FAILED:
            return ""
        kinds = [d.kind for d in self.diagnoses]
        return self.known_cause or cause_of(self.exit_code, self.error, kinds)

    @property
    def timed_out(self) -> bool:
        """A collective of this rank timed out (the NCCL watchdog, gloo's timeout)."""
        return any(d.kind == COLLECTIVE_TIMEOUT for d in self.diagnoses)

    def failed(self) -> FailedRank:
        return FailedRank(
            self.node,
            self.local_rank,
            self.rank,
            self.exit_code,
            self.error,
            self.cause,
            self.failed_order or 0,
        )

    def summary(self, culprit: bool = False) -> RankSummary:
        return RankSummary(
            self.rank,
            self.node,
            self.local_rank,
            self.state,
            self.exit_code,
            self.error,
            tuple(self.traceback),
            tuple(self.diagnoses),
            self.restarts,
            self.cause,
            culprit,
        )

    def changed(self, detail: str = "") -> RankChanged:
        """The event that tells the UI and the headless stream where this rank is now."""
        return RankChanged(
            self.rank,
            self.node,
            self.local_rank,
            self.state,
            self.exit_code,
            detail or self.error,
            tuple(self.diagnoses),
            self.restarts,
            self.straggler,
            self.suspect,
        )

    def add_diagnosis(self, diagnosis: Diagnosis) -> bool:
        """Keep what this rank's output says went wrong: the first report of each kind.

        Later ones of a kind (the same timeout on every retry, each lost peer) add nothing an
        operator needs first; the full log has them.
        """
        if len(self.diagnoses) >= MAX_DIAGNOSES or any(
            d.kind == diagnosis.kind for d in self.diagnoses
        ):
            return False
        self.diagnoses.append(diagnosis)
        return True

    @property
    def collecting(self) -> bool:
        """A traceback has begun and its exception line is still to come."""
        return self._collecting

    def note_line(self, text: str, seq: int | None = None) -> Diagnosis | None:
        """Keep the first Python traceback this rank prints, and its exception line.

        Returns the traceback's diagnosis once its exception line has been read.
        """
        body = _TORCH_RANK_TAG.sub("", text, count=1)
        start = _TRACE_START.search(body)
        if start:
            if not self.traceback:
                self._collecting = True
                self._trace_seq = seq
                self.traceback.append(body[start.start() :].strip())
            return None
        if self._collecting:
            if body[:1] not in (" ", "\t") and not _EXCEPTION_LINE.match(body):
                return None  # a stdout line read between the traceback's stderr lines
            self.traceback.append(body.rstrip())
            if body[:1] not in (" ", "\t") or len(self.traceback) >= MAX_TRACEBACK:
                self._collecting = False
                self.error = body.strip()
                return Diagnosis(TRACEBACK, self.error[:300], self.traceback[0], self._trace_seq)
        return None


TAIL_LOOK = 64  # the block's last lines looked at for each rank's last words


def keep_last_lines(
    texts: Sequence[str], local_ranks: Sequence[int | None], cells: Mapping[int, RankCell | None]
) -> None:
    """Each rank's last lines of a block (a look at the block's end only): what a rank that
    dies before any traceback said last (last_words.shown_error)."""
    tails: dict[int, list[str]] = {}
    for index in range(len(texts) - 1, max(-1, len(texts) - 1 - TAIL_LOOK), -1):
        local_rank = local_ranks[index]
        if local_rank is None:
            continue
        tail = tails.setdefault(local_rank, [])
        if len(tail) < LAST_LINES:
            tail.append(texts[index])
    for local_rank, tail in tails.items():
        cell = cells.get(local_rank)
        if cell is not None:
            cell.last_lines.extend(reversed(tail))
