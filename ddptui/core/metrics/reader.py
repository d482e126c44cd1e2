"""Provides MetricReader: a rank's line in, its MetricSample out, cheaply for lines with none."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ddptui.core.job.metric_patterns import PatternError, compile_metric_patterns
from ddptui.core.metrics.formats import LineMetrics, parse_line, parse_row, read_header
from ddptui.core.metrics.names import canonical_name, is_known
from ddptui.core.metrics.numbers import read_number
from ddptui.core.metrics.sample import MetricSample

__all__ = [
    "MetricReader",
    "PatternError",
    "block_spells_nan_or_inf",
    "compile_patterns",
    "may_hold_metric",
    "spells_nan_or_inf",
]

# The pre-filter: a line with no digit and no spelled NaN or Inf has no metric. Most lines
# that hold none leave at its cost: one scan in C, a few `in`.
_DIGIT = re.compile(r"[0-9]").search


def spells_nan_or_inf(text: str) -> bool:
    """Whether a text may hold a NaN or an infinity: a few substring scans, no regex."""
    return (
        "nan" in text or "NaN" in text or "inf" in text or "Inf" in text
        or "NAN" in text or "INF" in text
    )  # fmt: skip


def block_spells_nan_or_inf(block: str) -> bool:
    """spells_nan_or_inf for a block of many lines: two scans of its lowered copy, which on a
    block of tens of kilobytes cost a fifth of the six scans of the text itself (a 3-letter
    needle's scan slows on text full of its letters: digits, `n`s). Lowered, it also says
    yes to a `nAn`; the caller reads the lines it points to with its own exact test."""
    lowered = block.lower()
    return "nan" in lowered or "inf" in lowered


def may_hold_metric(text: str) -> bool:
    """The reader's pre-filter: a line with no digit and no spelled NaN or Inf holds none."""
    return _DIGIT(text) is not None or spells_nan_or_inf(text)


def compile_patterns(patterns: Mapping[str, str]) -> dict[str, re.Pattern[str]]:
    """A profile's own metrics (name -> regular expression with one group, the number), by
    canonical name; the rule is the job's (`job.metric_patterns`), so a profile that
    validates is one the reader can use.

    Raises:
        PatternError: a pattern does not compile or has not exactly one group.
    """
    compiled = compile_metric_patterns(patterns)
    return {canonical_name(name): regex for name, regex in compiled.items()}


class MetricReader:
    """Reads the metrics in ranks' lines: the common formats (`formats.FORMATS`) and the
    profile's own patterns, which win for the names they give.

    It remembers each rank's last printed step, so a line that prints none (a Trainer dict, a
    throughput line) belongs to the step that rank printed last, unless the caller knows
    better (the monitor's progress pattern) and says so; a rank that never printed a step
    has its reports counted instead (`MetricSample.report`). It also remembers each rank's
    last column header (YOLO's `Epoch GPU_mem box_loss ...`, fastai's), to read the rows
    printed under it (`formats.parse_row`).

    Args:
        patterns: the profile's own metrics, name -> regular expression with one group.
        min_interval: after a sample from a rank, that rank's lines are not read for this
            long (seconds, by the `ts` given): a rank that prints a metric line at every one
            of thousands of steps a second costs one read per interval, not one per line. A
            NaN loss stays NaN, so it is still seen; 0 reads every line.
    """

    def __init__(
        self, patterns: Mapping[str, str] | None = None, min_interval: float = 0.0
    ) -> None:
        self.patterns = compile_patterns(patterns or {})
        self.min_interval = min_interval
        self._steps: dict[int, int] = {}
        self._reports: dict[int, int] = {}  # rank -> samples read from its lines
        self._headers: dict[int, tuple[str, ...]] = {}  # rank -> its column table's header
        self._quiet_until: dict[int, float] = {}

    def step_of(self, rank: int) -> int:
        """The last step a rank's lines printed (0 before any)."""
        return self._steps.get(rank, 0)

    def may_report(self, text: str) -> bool:
        """Whether a line looks like one with a metric, without parsing it: a number (or a
        NaN) and a word of training (`names.is_known`), or a match of the job's own patterns.
        Cheaper than `read` by far; the line kept to read later is the last that passes."""
        if not may_hold_metric(text):
            return False
        if is_known(text.lower()):
            return True
        return any(regex.search(text) for regex in self.patterns.values())

    def quiet(self, rank: int, ts: float) -> bool:
        """Whether a rank's lines at `ts` are left unread (its last sample was too recent)."""
        return self.min_interval > 0.0 and ts < self._quiet_until.get(rank, ts)

    def read(
        self,
        rank: int,
        text: str,
        ts: float = 0.0,
        last_step: int | None = None,
        force: bool = False,
    ) -> MetricSample | None:
        """The sample in one line of a rank's output, or None if it reports no metric.

        Args:
            rank: the global rank that printed the line.
            text: the line, without the launcher's rank prefix.
            ts: when it was read.
            last_step: the rank's step as the caller knows it, for a line that prints none.
            force: read it even inside the rank's interval (its last line, kept for later).
        """
        if _DIGIT(text) is None and not spells_nan_or_inf(text):
            if "loss" in text or "acc" in text:
                header = read_header(text)
                if header is not None:
                    self._headers[rank] = header
            return None
        if not force and self.min_interval > 0.0 and ts < self._quiet_until.get(rank, ts):
            return None
        found = self.read_text(text, rank)
        if found is None:
            return None
        if self.min_interval > 0.0:
            self._quiet_until[rank] = ts + self.min_interval
        report = self._reports[rank] = self._reports.get(rank, 0) + 1
        step = found.step
        if step is not None:
            self._steps[rank] = step
            return MetricSample(rank, step, found.values, ts)
        step = last_step if last_step is not None else self._steps.get(rank, report)
        return MetricSample(rank, step, found.values, ts, report)

    def read_many(self, lines: Iterable[tuple[int, str]], ts: float = 0.0) -> list[MetricSample]:
        """The samples in a block of (rank, text) lines read at one time, in order; each
        line's step as `read` gives it (from the line, else the rank's last)."""
        read = self.read
        found = []
        for rank, text in lines:
            sample = read(rank, text, ts)
            if sample is not None:
                found.append(sample)
        return found

    def read_text(self, text: str, rank: int | None = None) -> LineMetrics | None:
        """A line's metrics, with no step but its own (None: none); with `rank`, a row under
        that rank's column header reads too."""
        if "\r" in text:  # a progress bar redrawn in place: the last drawing counts
            text = text.rstrip("\r").rpartition("\r")[2]
        found = parse_line(text)
        if found is None and rank is not None and rank in self._headers:
            found = parse_row(text, self._headers[rank])
        if not self.patterns:
            return found
        own: dict[str, float] = {}
        for name, regex in self.patterns.items():
            match = regex.search(text)
            if match is not None and match[1] is not None:
                value = read_number(match[1].strip())
                if value is not None:
                    own[name] = value
        if not own:
            return found
        if found is None:
            return LineMetrics(None, own)
        return LineMetrics(found.step, {**found.values, **own})
