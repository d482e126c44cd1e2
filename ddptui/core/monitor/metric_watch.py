"""Provides MetricWatch: the metrics in every rank's lines, at a capped rate, the last kept."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import compress, repeat
from operator import and_, eq, itemgetter, methodcaller
from typing import cast

from ddptui.core.metrics.reader import MetricReader, block_spells_nan_or_inf
from ddptui.core.metrics.sample import MetricSample
from ddptui.core.metrics.shapes import fold_key
from ddptui.core.metrics.store import MetricStore
from ddptui.core.metrics.wrong_numbers import WrongNumber, WrongNumberCheck, WrongNumberKind
from ddptui.core.monitor.framing import Attributed

# A rank's lines are read for metrics at most once per this many seconds (the reader's
# min_interval): ~14 us a metric line against ~3.5 us a line for the rest of `feed`, so a
# rank printing a metric on every line of a flood costs one read per interval.
METRIC_INTERVAL_S = 0.05
KEEP_LOOKBACK = 256
KEEP_SHAPES = 3  # a rank's last lines of this many shapes (a loss line, a throughput line)
SHAPE_LOOKBACK = 16  # a rank's own lines looked at before its newest kept metric line, at most
_RANK = itemgetter(1)
_TEXT = itemgetter(0)
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


_NUMBER_START = re.compile(r"[\d+.-]|nan|inf", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Pending:
    node: str
    local_rank: int | None
    text: str
    seq: int
    report: int | None = None  # which of its rank's report lines it is, where counted


class MetricWatch:
    """Reads the ranks' lines for metrics, keeps them (`store`) and checks the losses.

    While a rank is inside its interval its lines are not parsed (but a rank's first NaN or
    Inf is read at once), and its last lines that may hold a metric, one of each shape (a
    line's text without its digits: the last step's loss line, then the throughput line
    printed after it), are kept and read once the interval is over (at its next line, at the
    monitor's tick, or when its node's output ends): neither the last step nor a final
    throughput line after it is left out.
    """

    def __init__(
        self, patterns: Mapping[str, str] | None = None, interval: float = METRIC_INTERVAL_S
    ) -> None:
        self.reader = MetricReader(patterns, interval)
        self.store = MetricStore()
        self.check = WrongNumberCheck()
        self._pending: dict[int, list[_Pending]] = {}  # rank -> kept lines, oldest first
        self._broken: set[int] = set()  # ranks whose NaN or Inf was reported already
        # A rank whose lines print no step is told by which of its reports a value came in:
        # its report lines are counted, every one, read or not (the interval skips most).
        self._stepless: set[int] = set()  # ranks whose last sample had no step
        self._reports: dict[int, int] = {}  # rank -> its report lines before those marked
        self._marks: dict[int, list[int]] = {}  # rank -> this block's report lines' offsets
        self._fresh: dict[int, int] = {}  # rank -> the line of its first stepless sample
        self._heads: dict[int, str] = {}  # rank -> its report lines' words before a number

    def block(
        self, node: str, lines: list[Attributed], first: int, now: float, text: str = ""
    ) -> list[Sampled]:
        """The samples in a block of one node's attributed lines (numbered from `first`);
        `text`, the block's lines joined, if the caller has it (one search for a NaN).

        Rank by rank, not line by line: a rank inside its interval costs the block nothing
        but the look back for its last metric line; a rank out of it is read line by line
        only until its first sample.
        """
        found: list[Sampled] = []
        reader, pending = self.reader, self._pending
        found_ranks: set[int | None] = set(map(_RANK, lines))  # in C: a flood's blocks are long
        found_ranks.discard(None)
        ranks = cast("set[int]", found_ranks)
        self._fresh = {}  # found between blocks: stepless now, all of this block counted
        self._mark_reports(lines, ranks)
        active: set[int] = set()
        for rank in ranks:
            if not reader.quiet(rank, now) and not (
                rank in pending and self._read_kept(rank, pending.pop(rank), now, found)
            ):
                active.add(rank)
        after: dict[int, int] = dict.fromkeys(ranks - active, -1)  # rank -> lines kept after
        if active:
            for offset, (line, who, local_rank) in enumerate(lines):
                if who is not None and who in active:
                    kept = self._pending_at(node, local_rank, line, first, offset, who)
                    if self._read(who, kept, now, found):
                        active.discard(who)
                        after[who] = offset
                        if not active:
                            break
        if self._fresh:  # ranks found stepless just now: their report lines after it too
            fresh = {rank: seq - first for rank, seq in self._fresh.items()}
            self._fresh = {}
            self._mark_reports(lines, set(fresh), fresh)
        if not text:
            text = "\n".join(line[0] for line in lines)
        if block_spells_nan_or_inf(text):  # a rank's first NaN or Inf is never sampled away
            self._first_nans(node, lines, first, now, after, found)
        if after:
            self._keep_last(node, lines, first, after)
        for rank, offsets in self._marks.items():
            self._reports[rank] = self._reports.get(rank, 0) + len(offsets)
        self._marks = {}
        return found

    def _mark_reports(
        self, lines: list[Attributed], ranks: set[int], after: Mapping[int, int] | None = None
    ) -> None:
        """Where this block's report lines are (after `after`'s offset, by rank), for the
        ranks whose lines print no step: a line of theirs that starts with the words its
        reports start with (`may_report` where they start with their number); nothing for
        the ranks whose lines print their step."""
        counted = ranks & self._stepless if after is None else ranks
        if not counted:
            return
        alone = len(ranks) == 1  # the block's lines are one rank's (a node of one rank)
        for rank in counted:
            head = self._heads[rank]
            start = after[rank] + 1 if after is not None else 0
            rest = lines[start:] if start else lines
            offsets = range(start, len(lines))
            if head:  # in C, line by line: a flood's blocks are long
                said = map(methodcaller("startswith", head), map(_TEXT, rest))
                if not alone:
                    said = map(and_, said, map(eq, map(_RANK, rest), repeat(rank)))
                found = list(compress(offsets, said))
            else:
                may_report = self.reader.may_report
                found = [i for i in offsets if lines[i][1] == rank and may_report(lines[i][0])]
            if found:
                self._marks.setdefault(rank, []).extend(found)

    def _pending_at(
        self, node: str, local_rank: int | None, line: str, first: int, offset: int, rank: int
    ) -> _Pending:
        """A line of the block as kept or read, with which report of its rank it is."""
        marks = self._marks.get(rank)
        report = None
        if marks is not None:
            report = self._reports.get(rank, 0) + bisect_right(marks, offset)
        return _Pending(node, local_rank, line, first + offset, report)

    def _first_nans(
        self,
        node: str,
        lines: list[Attributed],
        first: int,
        now: float,
        after: dict[int, int],
        found: list[Sampled],
    ) -> None:
        for offset, (line, rank, local_rank) in enumerate(lines):
            if (
                rank in after
                and offset > after[rank]
                and rank not in self._broken
                and _NAN_OR_INF(line) is not None
            ):
                kept = self._pending_at(node, local_rank, line, first, offset, rank)
                self._read(rank, kept, now, found, force=True)
                after[rank] = offset

    def _keep_last(
        self, node: str, lines: list[Attributed], first: int, after: dict[int, int]
    ) -> None:
        """For each rank, its last lines in the block that hold a metric (after the one
        read, if any), one of each shape and at most KEEP_SHAPES, kept to read once its
        interval is over; found from the end (under a flood, a few lines back), at most
        KEEP_LOOKBACK lines back: a block of lines with none costs no more than that. A
        rank's search ends SHAPE_LOOKBACK of its own lines before the newest it kept (the
        lines a burst ends with are behind), and a line of a new shape is kept only if it
        reads (a traceback's `loss` line takes no place). They replace what the rank had
        kept: its newer lines of each shape."""
        may_report, read_text = self.reader.may_report, self.reader.read_text
        wanted = dict(after)
        kept: dict[int, dict[str, _Pending]] = {}  # rank -> its kept lines by shape
        left: dict[int, int] = {}  # rank -> its own lines still looked at
        duds: set[str] = set()  # shapes that looked like a metric and did not read
        for offset in range(len(lines) - 1, max(len(lines) - KEEP_LOOKBACK, 0) - 1, -1):
            line, rank, local_rank = lines[offset]
            if rank not in wanted:
                continue
            assert rank is not None
            shapes = kept.get(rank)
            if offset <= wanted[rank] or left.get(rank) == 0:
                del wanted[rank]
                if not wanted:
                    break
                continue
            if shapes is not None:
                left[rank] -= 1
            if not may_report(line):
                continue
            shape = fold_key(line)
            if shape in duds or (shapes is not None and shape in shapes):
                continue
            if read_text(line) is None:
                duds.add(shape)
                continue
            if shapes is None:
                shapes = kept[rank] = {}
                left[rank] = SHAPE_LOOKBACK
            shapes[shape] = self._pending_at(node, local_rank, line, first, offset, rank)
            if len(shapes) >= KEEP_SHAPES:
                del wanted[rank]
                if not wanted:
                    break
        for rank, shapes in kept.items():
            newest = {fold_key(p.text): p for p in self._pending.get(rank, [])}
            newest.update(shapes)
            ordered = sorted(newest.values(), key=lambda p: p.seq)
            self._pending[rank] = ordered[-KEEP_SHAPES:]

    def due(self, now: float, node: str | None = None) -> list[Sampled]:
        """The kept lines whose rank's interval is over; with `node`, every one of that
        node's (its output ended)."""
        found: list[Sampled] = []
        for rank, kept in list(self._pending.items()):
            if (node is not None and kept[0].node == node) or (
                node is None and not self.reader.quiet(rank, now)
            ):
                del self._pending[rank]
                self._read_kept(rank, kept, now, found, force=node is not None)
        return found

    def _read_kept(
        self, rank: int, kept: list[_Pending], now: float, found: list[Sampled], force: bool = False
    ) -> bool:
        """Read a rank's kept lines as one sample, at the step of the last (a later value of
        a name over an earlier one): the rank's rate holds, and no older line of a rank is
        read after another rank's newer one. Whether the rank is now inside its interval."""
        *older, last = kept
        if not older:
            return self._read(rank, last, now, found, force=force)
        values: dict[str, float] = {}
        step = report = None
        for line in kept:  # oldest first: the reader's step for a line with none moves along
            sample = self.reader.read(rank, line.text, now, force=True)
            if sample is not None:
                values.update(sample.values)
                step, report = sample.step, sample.report
        if step is None:
            return False
        self._record(rank, last, MetricSample(rank, step, values, now, report), found)
        return self.reader.min_interval > 0.0

    def _read(
        self, rank: int, line: _Pending, now: float, found: list[Sampled], force: bool = False
    ) -> bool:
        """Read one line; whether the rank is now inside its interval."""
        sample = self.reader.read(rank, line.text, now, force=force)
        if sample is None:
            return False
        self._record(rank, line, sample, found)
        return self.reader.min_interval > 0.0

    def _record(
        self, rank: int, line: _Pending, sample: MetricSample, found: list[Sampled]
    ) -> None:
        if sample.report is None:
            self._stepless.discard(rank)
        elif line.report is not None:  # counted: which of its report lines it really is
            sample = replace(sample, report=line.report)
        elif rank not in self._stepless:  # its first: every report line before was read
            self._stepless.add(rank)
            self._reports[rank] = sample.report or 0
            self._fresh[rank] = line.seq
            # its report lines are told by their words before the first number (`loss: `):
            # a test as cheap as a line's first bytes (a line that starts with its number
            # is asked `may_report` instead)
            number = _NUMBER_START.search(line.text)
            self._heads[rank] = line.text[: number.start()] if number else ""
        self.store.add(sample)
        wrong = tuple(self.check.check(sample))
        if any(w.kind is WrongNumberKind.NAN_OR_INF for w in wrong):
            self._broken.add(rank)
        found.append(Sampled(line.node, line.local_rank, sample, line.text, line.seq, wrong))
