"""Provides ProgressScanner: which lines of a block report progress, in one pass over the block.

Why: a progress pattern searched line by line is a regex call per line, the largest per-line
cost of ingest under a flood, while most lines are no progress report. One search over the
block's joined text finds the candidate lines; each candidate is then searched on its own, so
the values (and which lines count) are exactly those of a search line by line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ddptui.core.diagnose.patterns import progress_value

# A pattern that sees the start or end of its subject (\A, \Z) or looks past its match could
# find nothing in the block where a line alone would match: such a pattern goes line by line.
_LINE_BY_LINE = ("\\A", "\\Z", "(?<", "(?!")


class ProgressScanner:
    """Finds the lines that report progress, and their values (`progress_value`'s)."""

    def __init__(self, pattern: str) -> None:
        self.line_pattern = re.compile(pattern)
        self._block_pattern = (
            None if any(t in pattern for t in _LINE_BY_LINE) else re.compile(pattern, re.M)
        )

    def values(self, texts: list[str], block: str) -> Iterator[tuple[int, float]]:
        """(index into `texts`, value) of each progress line, in order.

        `block` is `texts` joined by newlines (the caller has it already).
        """
        pattern, line_pattern = self._block_pattern, self.line_pattern
        if pattern is None or block.count("\n") != len(texts) - 1:
            yield from self._line_by_line(texts)
            return
        candidates: list[int] = []
        line, pos = 0, 0
        for match in pattern.finditer(block):
            start = match.start()
            if "\n" in match.group(0):  # a match across lines: the block cannot tell
                yield from self._line_by_line(texts)
                return
            line += block.count("\n", pos, start)
            pos = start
            if not candidates or candidates[-1] != line:
                candidates.append(line)
        for index in candidates:
            value = progress_value(line_pattern, texts[index])
            if value is not None:
                yield index, value

    def _line_by_line(self, texts: list[str]) -> Iterator[tuple[int, float]]:
        pattern = self.line_pattern
        for index, text in enumerate(texts):
            value = progress_value(pattern, text)
            if value is not None:
                yield index, value
