"""Progress lines found in one search of a block are exactly those a search line by line finds."""

from __future__ import annotations

import random

from ddptui.core.job.spec import DEFAULT_PROGRESS_PATTERN
from ddptui.core.monitor.patterns import progress_value
from ddptui.core.monitor.progress import ProgressScanner

PATTERNS = [
    DEFAULT_PROGRESS_PATTERN,
    r"^step (\d+)",  # anchored: MULTILINE makes ^ a line start in the block
    r"loss=([\d.]+)$",
    r"\Aepoch (\d+)",  # sees the subject's start: searched line by line
    r"step(?=\s*\d)",  # looks past its match: the block may see the next line
    r"iter\s+(\d+)",  # \s crosses lines in the block: such a block goes line by line
    r"(?s)epoch.(\d)",
    r"(\d)\s*(\d)",  # a match across lines can take the start of the next line's own
    r"done",  # no group: NaN
]
PIECES = ["step ", "Step: 3", "epoch", " 12", "\t", "iter", "loss=0.5", "done", "x", "", " ", "7"]
# the default pattern's words in other cases, glued to others, and characters that lower into
# two (the block lowered is then no longer the block)
PIECES += ["EPOCH=", "Iteration", "STEPS:", "mystep", "_iter", "\u0130", "\u212a", "=", "é"]


def _line_by_line(pattern: str, texts: list[str]) -> list[tuple[int, float]]:
    compiled = ProgressScanner(pattern).line_pattern
    out = []
    for index, text in enumerate(texts):
        value = progress_value(compiled, text)
        if value is not None:
            out.append((index, value))
    return out


def _same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    """Equal, NaN included (a progress line with no number counts as NaN)."""
    return len(a) == len(b) and all(
        i == j and (x == y or (x != x and y != y)) for (i, x), (j, y) in zip(a, b, strict=True)
    )


def test_block_search_finds_the_lines_and_values_a_line_by_line_search_does() -> None:
    rng = random.Random(5)
    for pattern in PATTERNS:
        scanner = ProgressScanner(pattern)
        for _ in range(400):
            texts = [
                "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 5)))
                for _ in range(rng.randint(1, 8))
            ]
            got = list(scanner.values(texts, "\n".join(texts)))
            assert _same(got, _line_by_line(pattern, texts)), (pattern, texts, got)


def test_a_block_with_no_progress_line_yields_nothing() -> None:
    texts = [f"t=1.0 seq={i} loss=0.{i:04d} step-ok" for i in range(100)]
    assert list(ProgressScanner(DEFAULT_PROGRESS_PATTERN).values(texts, "\n".join(texts))) == []
