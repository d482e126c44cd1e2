"""Provides ProgressScanner: which lines of a block report progress, in one pass over the block.

Why: a progress pattern searched line by line is a regex call per line, the largest per-line
cost of ingest under a flood, while most lines are no progress report. One search over the
block's joined text finds the candidate lines; each candidate is then searched on its own, so
the values (and which lines count) are exactly those of a search line by line.

The default pattern's candidates are found faster still: its words searched in the block
lowered, each a regex that begins with a literal (re skips to a literal in C; the pattern's
own leading \\b and case-folding are tried at every character: 0.42 against 1.43 us a flood
line). Every line the pattern matches holds one of them, so the candidates are a superset.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from ddptui.core.job.spec import DEFAULT_PROGRESS_PATTERN
from ddptui.core.monitor.patterns import progress_value

# A pattern that sees the start or end of its subject (\A, \Z) or looks past its match could
# find nothing in the block where a line alone would match: such a pattern goes line by line.
_LINE_BY_LINE = ("\\A", "\\Z", "(?<", "(?!", "(?=")
# The default pattern's words as it reads them (before its number), lowered.
_DEFAULT_WORDS = tuple(
    re.compile(rf"(?a){word}\b\s*[:=]?\s*\d") for word in ("steps?", "epoch", "iter(?:ation)?")
)


class ProgressScanner:
    """Finds the lines that report progress, and their values (`progress_value`'s)."""

    def __init__(self, pattern: str) -> None:
        self.line_pattern = re.compile(pattern)
        self._words = _DEFAULT_WORDS if pattern == DEFAULT_PROGRESS_PATTERN else None
        if self._words is not None or any(t in pattern for t in _LINE_BY_LINE):
            self._block_pattern = None
        else:
            self._block_pattern = re.compile(pattern, re.M)

    def values(self, texts: list[str], block: str) -> Iterator[tuple[int, float]]:
        """(index into `texts`, value) of each progress line, in order.

        `block` is `texts` joined by newlines (the caller has it already).
        """
        yield from self._read(texts, self._candidates(texts, block))

    def _candidates(self, texts: list[str], block: str) -> Sequence[int]:
        """The lines that may report progress, in order: every line where the block cannot
        tell (a pattern that must go line by line, a match across lines)."""
        every = range(len(texts))
        if block.count("\n") != len(texts) - 1:
            return every
        if self._words is not None:
            lowered = block.lower()
            if len(lowered) != len(block):  # a character lowered into two
                return every
            found = {m.start() for words in self._words for m in words.finditer(lowered)}
            return _lines_at(block, sorted(found))
        if self._block_pattern is None:
            return every
        starts = []
        for match in self._block_pattern.finditer(block):
            if "\n" in match.group(0):  # a match across lines: the block cannot tell
                return every
            starts.append(match.start())
        return _lines_at(block, starts)

    def _read(self, texts: list[str], indices: Iterable[int]) -> Iterator[tuple[int, float]]:
        pattern = self.line_pattern
        for index in indices:
            value = progress_value(pattern, texts[index])
            if value is not None:
                yield index, value


def _lines_at(block: str, starts: list[int]) -> list[int]:
    """The lines (indices) of the block that hold these offsets, in order, each once."""
    lines: list[int] = []
    line, pos = 0, 0
    for start in starts:
        line += block.count("\n", pos, start)
        pos = start
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines
