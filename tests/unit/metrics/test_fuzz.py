"""Fuzzing the line readers: whatever a rank prints, they return, and only real readings."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptui.core.metrics.formats import FORMATS, parse_line
from ddptui.core.metrics.reader import MetricReader
from ddptui.core.metrics.shapes import ShapeFolder, fold_shapes, shape_of

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# What the readers look for, mixed with anything at all.
MARKS = st.sampled_from(
    [
        "step", "loss", "lm loss", "iteration", "Epoch ", "samples/s", "tps", "acc", "lr",
        "memory", "GiB", "%", "|", ":", "=", " ", "{", "}", "'", '"', ",", ".", "/", "e-", "-",
        "nan", "inf", "Infinity", "1", "23", "4,567", "0.5", "1e999", "9" * 40, "it/s", "[",
        "\r", "\t", "k", "M", "(", ")", "elapsed time per iteration (ms)", "s/it", "lm loss",
    ]
)  # fmt: skip
LINES = st.one_of(st.lists(MARKS, max_size=30).map("".join), st.text(max_size=200))


def _fair(value: float, line: str) -> bool:
    """A finite number or a NaN; an infinity only where the line spells one."""
    return math.isfinite(value) or math.isnan(value) or "inf" in line.lower()


@FUZZ
@given(LINES)
def test_the_readers_never_raise_and_read_only_numbers(line: str) -> None:
    for parse in FORMATS:
        found = parse(line)
        if found is not None:
            assert found.values and all(isinstance(v, float) for v in found.values.values())
            assert all(_fair(v, line) for v in found.values.values())
            assert found.step is None or found.step >= 0
    sample = MetricReader({"own": r"own=(\S+)"}).read(3, line, ts=1.0)
    if sample is not None:
        assert sample.rank == 3 and sample.step >= 0
        assert all(_fair(v, line) for v in sample.values.values())


@FUZZ
@given(LINES)
def test_the_gate_before_the_formats_declines_no_line_a_format_reads(line: str) -> None:
    first = next((found for parse in FORMATS if (found := parse(line)) is not None), None)
    assert repr(parse_line(line)) == repr(first)  # by repr: a NaN read is equal to itself


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 64), LINES), max_size=20))
def test_the_shape_fold_never_raises_and_keeps_every_line(lines: list[tuple[int, str]]) -> None:
    groups = fold_shapes(lines)
    assert sum(group.lines for group in groups) == len(lines)
    by_key = {group.key: group for group in groups}
    assert len(by_key) == len(groups)
    for rank, text in lines:
        group = by_key[shape_of(text)[0]]
        assert rank in group.ranks
        if group.lines == 1:
            assert group.text() == text.replace("\x00", "\ufffd")


@FUZZ
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 8)), LINES), max_size=40))
def test_the_views_folder_keeps_every_line_and_a_batch_folds_as_one_by_one(
    lines: list[tuple[int | None, str]],
) -> None:
    """Each line starts a row or joins one a line of another rank started, never both; the
    rows' texts are read without raising; a batch folds exactly as its lines one at a time."""
    texts, ranks = [t for _, t in lines], [r for r, _ in lines]
    kept, joined = ShapeFolder(window=16).fold(texts, ranks, 100)
    singly, at = ShapeFolder(window=16), 100
    rows_singly: dict[int, str] = {}
    for rank, text in lines:
        group = singly.join(text, rank, at) if rank is not None else None
        if group is None:
            at += 1
        else:
            rows_singly[group.row] = group.render()
    assert len(kept) == at - 100
    assert {row: group.render() for row, group in joined.items()} == rows_singly
    joins = sum(group.lines - 1 for group in joined.values())
    assert len(kept) + joins == len(lines)
