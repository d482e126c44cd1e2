"""Provides MetricWatch: the metrics in every rank's lines, at a capped rate, the last kept."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ddptui.core.metrics.reader import MetricReader
from ddptui.core.metrics.sample import MetricSample
from ddptui.core.metrics.store import MetricStore
from ddptui.core.metrics.wrong_numbers import WrongNumber, WrongNumberCheck, WrongNumberKind
from ddptui.core.monitor.framing import Attributed

# A rank's lines are read for metrics at most once per this many seconds (the reader's
# min_interval): ~14 us a metric line against ~3.5 us a line for the rest of `feed`, so a
# rank printing a metric on every line of a flood costs one read per interval.
METRIC_INTERVAL_S = 0.05
_NAN_OR_INF = re.compile(r"(?<![A-Za-z])(?:nan|NaN|NAN|inf|Inf|INF)(?![A-Za-z])").search


@dataclass(frozen=True, slots=True)
class Sampled:
    """A sample read from a rank's line, where it came from, and what is wrong with it."""

    node: str
    local_rank: int | None
    sample: MetricSample
    line: str
    seq: int
    wrong: tuple[WrongNumber, ...] = ()


@dataclass(frozen=True, slots=True)
class _Pending:
    node: str
    local_rank: int | None
    text: str
    seq: int


class MetricWatch:
    """Reads the ranks' lines for metrics, keeps them (`store`) and checks the losses.

    While a rank is inside its interval its lines are not parsed (but a rank's first NaN or
    Inf is read at once), and the last one that may hold a metric is kept and read once the
    interval is over (at its next line, at the
    monitor's tick, or when its node's output ends): the last line of a burst, a final
    throughput line after the last step, is never the one left out.
    """

    def __init__(
        self, patterns: Mapping[str, str] | None = None, interval: float = METRIC_INTERVAL_S
    ) -> None:
        self.reader = MetricReader(patterns, interval)
        self.store = MetricStore()
        self.check = WrongNumberCheck()
        self._pending: dict[int, _Pending] = {}
        self._broken: set[int] = set()  # ranks whose NaN or Inf was reported already

    def block(self, node: str, lines: list[Attributed], first: int, now: float) -> list[Sampled]:
        """The samples in a block of one node's attributed lines (numbered from `first`)."""
        found: list[Sampled] = []
        reader, pending, may_report = self.reader, self._pending, self.reader.may_report
        broken = self._broken
        quiet: dict[int, bool] = {}
        last_quiet: dict[int, int] = {}
        for offset, (text, rank, local_rank) in enumerate(lines):
            if rank is None:
                continue
            rank_quiet = quiet.get(rank)
            if rank_quiet is None:
                rank_quiet = reader.quiet(rank, now)
                if not rank_quiet and rank in pending:
                    rank_quiet = self._read(rank, pending.pop(rank), now, found)
                quiet[rank] = rank_quiet
            if rank_quiet:
                if may_report(text):  # the last line worth keeping, without parsing it
                    if rank not in broken and _NAN_OR_INF(text) is not None:
                        # a rank's first NaN or Inf is never sampled away: it is the news
                        self._read(rank, _Pending(node, local_rank, text, first + offset),
                                   now, found, force=True)  # fmt: skip
                        continue
                    last_quiet[rank] = offset
                continue
            seq = first + offset
            quiet[rank] = self._read(rank, _Pending(node, local_rank, text, seq), now, found)
        for rank, offset in last_quiet.items():
            text, _, local_rank = lines[offset]
            pending[rank] = _Pending(node, local_rank, text, first + offset)
        return found

    def due(self, now: float, node: str | None = None) -> list[Sampled]:
        """The kept lines whose rank's interval is over; with `node`, every one of that
        node's (its output ended)."""
        found: list[Sampled] = []
        for rank, kept in list(self._pending.items()):
            if (node is not None and kept.node == node) or (
                node is None and not self.reader.quiet(rank, now)
            ):
                del self._pending[rank]
                self._read(rank, kept, now, found, force=node is not None)
        return found

    def _read(
        self, rank: int, line: _Pending, now: float, found: list[Sampled], force: bool = False
    ) -> bool:
        """Read one line; whether the rank is now inside its interval."""
        sample = self.reader.read(rank, line.text, now, force=force)
        if sample is None:
            return False
        self.store.add(sample)
        wrong = tuple(self.check.check(sample))
        if any(w.kind is WrongNumberKind.NAN_OR_INF for w in wrong):
            self._broken.add(rank)
        found.append(Sampled(line.node, line.local_rank, sample, line.text, line.seq, wrong))
        return self.reader.min_interval > 0.0
