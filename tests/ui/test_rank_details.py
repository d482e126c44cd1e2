"""The chosen rank's details: state, step rate, cause and last line."""

from __future__ import annotations

from ddptui.core.events import RankState
from ddptui.ui.widgets.grid_cells import RankGridCell
from ddptui.ui.widgets.rank_details import describe_rank


def test_details_name_the_rank_its_state_step_rate_cause_and_last_line() -> None:
    cell = RankGridCell("local1", 1)
    cell.rank, cell.state, cell.detail = 3, RankState.RUNNING, "straggler: 0.20 steps/s"
    text = describe_rank(cell, "Epoch 7 | Batchsize: 32", 2.4).plain
    assert text.splitlines() == [
        "rank 3 · local1 L1 · running · 2.40 steps/s",
        "cause: straggler: 0.20 steps/s",
        "last line: Epoch 7 | Batchsize: 32",
    ]


def test_no_step_rate_is_shown_before_the_rank_reports_progress() -> None:
    cell = RankGridCell("local0", 0)
    assert "steps/s" not in describe_rank(cell, None, None).plain
