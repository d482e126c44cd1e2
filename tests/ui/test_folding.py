"""Folding, without an app: rank sets, repeated log lines, node ranges in the compact grid."""

from __future__ import annotations

from ddptui.core.events import NodeState, RankChanged, RankState
from ddptui.ui.widgets.grid_cells import NodeRow, find_cell
from ddptui.ui.widgets.grid_layout import (
    cell_at,
    count_looks,
    describe_counts,
    fold_runs,
    layout,
)
from ddptui.ui.widgets.logs.log_fold import LineFolder, rank_set


def test_rank_sets_are_ranges_and_lists() -> None:
    assert rank_set([3]) == "r3"
    assert rank_set([*range(7), *range(8, 16)]) == "r0-6,8-15"
    assert rank_set([5, 1, 2, 2, 9]) == "r1-2,5,9"


def test_lines_that_differ_only_in_numbers_join_and_other_words_keep_a_line_apart() -> None:
    """Rank 7's `Steps: 9` joins the others' `Steps: 8` since lines fold by shape (issue 24:
    sixteen ranks' epoch line at 2x8 stayed sixteen rows when only identical texts folded);
    the row shows the range, `Steps: 8..9`. A line whose words differ stays apart."""
    folder = LineFolder()
    line = "Epoch 3 | Batchsize: 32 | Steps: 8"
    assert folder.join(line, 0, row=10) is None  # the first starts a row
    group = None
    for rank in range(1, 16):
        text = line.replace("Steps: 8", "Steps: 9") if rank == 7 else line
        group = folder.join(text, rank, row=11)
        assert group is not None and group.row == 10
    assert group is not None and rank_set(group.ranks) == "r0-15"
    assert group.render() == "[r0-15] Epoch 3 | Batchsize: 32 | Steps: 8..9"
    assert folder.join("Epoch 3 | Batchsize: 32 | Stages: 8", 7, row=12) is None  # a word


def test_a_rank_repeating_itself_or_a_line_long_ago_starts_a_new_row() -> None:
    folder = LineFolder(window=100)
    assert folder.join("loss 1.0", 0, row=0) is None
    assert folder.join("loss 1.0", 0, row=1) is None  # the same rank again: new news
    assert folder.join("loss 1.0", 1, row=2) is not None
    assert folder.join("loss 1.0", 2, row=500) is None  # too far back to fold into


def rows(count: int, nproc: int, state: RankState = RankState.RUNNING) -> list[NodeRow]:
    out = [NodeRow(f"node{i:03d}", nproc) for i in range(1, count + 1)]
    for n, row in enumerate(out):
        for cell in row.cells:
            cell.show(RankChanged(n * nproc + cell.local_rank, row.node, cell.local_rank, state))
    return out


def text(line: tuple[object, ...]) -> str:
    return "".join(span.text for span in line)  # type: ignore[attr-defined]


def test_runs_of_same_state_nodes_fold_into_ranges_and_outliers_stand_out() -> None:
    grid = rows(128, 8)
    odd = grid[40].cells[3]
    odd.show(RankChanged(323, "node041", 3, RankState.FAILED, 7))
    grid[99].cells[0].show(RankChanged(792, "node100", 0, RankState.HUNG))
    lines = [text(line) for line in layout(grid, 60, 8)]
    assert lines[0] == "node[001-040] ▶×320 running"
    assert lines[1] == " " * 17 + "01234567"  # local ranks, over the first node's glyphs
    assert lines[2] == "node041 r320-327 ▶▶▶✗▶▶▶▶"
    assert lines[3] == "node[042-099] ▶×464 running"
    assert lines[4] == "node100 r792-799 !▶▶▶▶▶▶▶"
    assert lines[5] == "node[101-128] ▶×224 running"
    assert len(lines) == 6
    assert describe_counts(count_looks(grid)) == "running 1022 · hung 1 · failed 1"
    assert cell_at(layout(grid, 60, 8)[2], len("node041 r320-327 ") + 3) is odd


def test_two_same_nodes_do_not_fold_and_a_chosen_rank_unfolds_its_node() -> None:
    assert [text(line) for line in layout(rows(2, 4), 16, 4)] == [
        "        0123",
        "node001 ▶▶▶▶",
        "node002 ▶▶▶▶",
    ]
    grid = rows(6, 4)
    grid[2].cells[1].selected = True
    assert [len(run) for run in fold_runs(grid)] == [2, 1, 3]


def test_glyphs_wrap_under_the_first_when_a_node_has_more_ranks_than_fit() -> None:
    grid = rows(2, 30)
    grid[1].cells[0].show(RankChanged(30, "node002", 0, RankState.DONE, 0))
    lines = [text(line) for line in layout(grid, 20, 30)]
    assert lines[0] == "node001 " + "▶" * 12
    assert lines[1] == " " * 8 + "▶" * 12
    assert lines[2] == " " * 8 + "▶" * 6
    assert lines[3] == "node002 ✓" + "▶" * 11
    assert sum(line.count("▶") + line.count("✓") for line in lines) == 60  # every rank


def test_wide_and_few_nodes_get_labelled_cells() -> None:
    grid = rows(2, 2)
    grid[0].state = NodeState.RUNNING
    lines = [text(line) for line in layout(grid, 100, 2)]
    assert "r0 ▶" in lines[0] and "r1 ▶" in lines[0] and lines[1] == ""
    assert text(layout(grid, 20, 2)[0]) == "node001 r0▶ r1▶ "
    assert [text(line) for line in layout(grid, 14, 2)] == [
        "        01",
        "node001 ▶▶",
        "node002 ▶▶",
    ]


def test_a_long_name_is_cut_with_a_sign() -> None:
    grid = [NodeRow("a-very-long-node-name-indeed-0001", 2)]
    line = text(layout(grid, 20, 2)[0])
    assert line == "a-very-lo… L0· L1· "


def test_go_to_finds_nodes_local_ranks_and_global_ranks() -> None:
    grid = rows(3, 4)
    assert find_cell(grid, "node002") is grid[1].cells[0]
    assert find_cell(grid, "node002/3") is grid[1].cells[3]
    assert find_cell(grid, "r9") is grid[2].cells[1]
    assert find_cell(grid, "9") is grid[2].cells[1]
    assert find_cell(grid, "node009") is None and find_cell(grid, "node002/7") is None


def test_a_stall_suspect_has_a_glyph_of_its_own() -> None:
    grid = rows(3, 2, RankState.HUNG)
    grid[1].cells[1].show(RankChanged(3, "node002", 1, RankState.HUNG, suspect=True))
    lines = [text(line) for line in layout(grid, 14, 2)]
    assert lines == ["        01", "node001 !!", "node002 !‼", "node003 !!"]


def test_a_2x8_grid_too_narrow_for_labelled_cells_still_names_every_rank() -> None:
    """Each node's ranks as a range before its glyphs, local ranks over them: the cell at
    position i of `r8-15` is rank 8+i, local rank i."""
    grid = rows(2, 8)
    lines = [text(line) for line in layout(grid, 40, 8)]
    assert lines == [
        "              01234567",
        "node001 r0-7  ▶▶▶▶▶▶▶▶",
        "node002 r8-15 ▶▶▶▶▶▶▶▶",
    ]
    assert cell_at(layout(grid, 40, 8)[2], len("node002 r8-15 ") + 5) is grid[1].cells[5]
    pending = [NodeRow("node001", 8)]
    assert [text(line) for line in layout(pending, 30, 8)] == [
        "        01234567",
        "node001 ········",
    ]


def test_a_running_rank_with_a_nan_loss_is_marked_in_the_grid() -> None:
    from ddptui.core.events import Diagnosis

    (row,) = rows(1, 2)
    nan = Diagnosis("nan_or_inf", "loss is nan at step 6", "step=6 loss=nan", 55)
    row.cells[1].show(RankChanged(1, row.node, 1, RankState.RUNNING, diagnoses=(nan,)))
    assert row.cells[1].render() == "r1 ▶nan"
    assert row.cells[1].glyph == "≠" and row.cells[0].glyph == "▶"
    row.cells[1].show(RankChanged(1, row.node, 1, RankState.FAILED, 1, diagnoses=(nan,)))
    assert row.cells[1].render() == "r1 ✗1"  # once it fails, its exit says more
