"""Folding lines that differ only in their numbers: shapes, number ranges, rank sets."""

from __future__ import annotations

from ddptui.core.metrics.shapes import ShapeFolder, fold_shapes, rank_set, shape_key, shape_of


def test_shapes_ignore_numbers_only() -> None:
    assert shape_key("Epoch 3 | Steps: 31") == shape_key("Epoch 12 | Steps: 4")
    assert shape_key("Epoch 3 | Steps: 31") != shape_key("Epoch 3 | Step: 31")
    assert shape_key("loss=0.5") == shape_key("loss=1e-05") != shape_key("loss=nan")
    assert shape_key("0") != shape_key("\x00")  # a line's own NUL is no number's place
    key, numbers = shape_of("rank 1 epoch=2/3 loss=0.0001")
    assert numbers == ["1", "2", "3", "0.0001"] and "0" not in key


def test_sixteen_ranks_one_line_with_each_numbers_range() -> None:
    lines = [(r, f"[RANK {r}] Epoch 3 | Batchsize: 32 | Steps: {31 + r % 4}") for r in range(16)]
    (group,) = fold_shapes(lines)
    assert group.render() == "[r0-15] [RANK 0..15] Epoch 3 | Batchsize: 32 | Steps: 31..34"
    assert group.lines == 16


def test_ranges_keep_the_printed_form_and_odd_lines_stay_apart() -> None:
    lines = [(0, "node007 took 0.50 s"), (1, "node012 took 0.125 s"), (2, "node009 took 1.0 s")]
    lines.append((3, "node003 timed out after 5 s"))
    first, odd = fold_shapes(lines)
    assert first.render() == "[r0-2] node007..012 took 0.125..1.0 s"
    assert odd.render() == "[r3] node003 timed out after 5 s"


def test_rank_sets() -> None:
    assert rank_set([3]) == "r3"
    assert rank_set([*range(7), *range(8, 16)]) == "r0-6,8-15"


def test_the_folder_joins_other_ranks_and_a_repeating_rank_starts_a_row() -> None:
    folder = ShapeFolder(window=100)
    assert folder.join("step 1 loss 2.0", 0, row=0) is None
    group = folder.join("step 1 loss 2.5", 1, row=1)
    assert group is not None and group.row == 0 and group.text() == "step 1 loss 2.0..2.5"
    assert folder.join("step 2 loss 1.9", 0, row=2) is None  # rank 0 again: its next step
    later = folder.join("step 2 loss 1.8", 1, row=3)
    assert later is not None and later.row == 2 and later.render() == "[r0-1] step 2 loss 1.8..1.9"
    assert folder.join("step 3 loss 1.0", 2, row=500) is None  # too far back to fold into


def test_a_line_whose_digits_sit_otherwise_joins_the_row_not_its_ranges() -> None:
    """`5.` and `5.5` differ only in a digit, so they share a row; the ranges are the first
    line's form's (the second's numbers sit elsewhere), its rank is in the set."""
    folder = ShapeFolder(window=100)
    assert folder.join("took 5. s", 0, row=0) is None
    group = folder.join("took 5.5 s", 1, row=1)
    assert group is not None and group.render() == "[r0-1] took 5. s"
    assert folder.join("took 7. s", 2, row=2) is group
    assert group.render() == "[r0-2] took 5..7. s" and group.lines == 3


def test_a_batch_reads_no_number_until_its_rows_are_asked_for() -> None:
    folder = ShapeFolder(window=100)
    texts = [f"step {s} loss {1 / (s + r + 1):.3f}" for s in range(3) for r in range(4)]
    kept, joined = folder.fold(texts, [r for _ in range(3) for r in range(4)], 0)
    assert kept == [0, 4, 8] and sorted(joined) == [0, 1, 2]
    assert all(not group.numbers for group in joined.values())  # nothing parsed yet
    assert joined[1].render() == "[r0-3] step 1 loss 0.200..0.500"
    assert joined[1].numbers and not joined[2].numbers
