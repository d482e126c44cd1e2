"""Provides the checks of single ranks against the others: hung (silent for its budget while
others print) and slow by step rate (well under the others' median).

The board keeps each rank's last output and progress; these judge them, and the board makes
the moves they decide (a rank hung, its straggler mark).
"""

from __future__ import annotations

from collections.abc import Mapping

from ddptui.core.events import Diagnosis, Event, RankState
from ddptui.core.monitor.board import RankBoard
from ddptui.core.monitor.patterns import HUNG

STRAGGLER_RATIO = 0.5  # a rank at under half the others' median rate is a straggler


def check_hangs(
    board: RankBoard,
    now: float,
    timeout: float,
    budgets: Mapping[tuple[str, int], float] | None = None,
) -> list[Event]:
    """A running rank silent for its budget (`budgets`, by node and local rank: the job's
    rhythm; else `timeout`) while another rank printed since is hung."""
    running = [c for c in board.all_cells() if c.state == RankState.RUNNING]
    if not running:
        return []
    newest = max(c.last_output for c in running)
    events: list[Event] = []
    for cell in running:
        budget = budgets.get((cell.node, cell.local_rank), timeout) if budgets else timeout
        if now - cell.last_output > budget and newest - cell.last_output > budget / 2:
            silent = f"silent for {now - cell.last_output:.0f} s while others print"
            cell.add_diagnosis(Diagnosis(HUNG, f"hung: {silent}"))
            events += board.move(cell, RankState.HUNG, detail=silent)
    return events


def stragglers(rates: dict[int, float], ratio: float = STRAGGLER_RATIO) -> dict[int, float]:
    """Which of `rates` (key -> rate) run at under `ratio` of the others' median.

    Returns key -> that median, for the detail line. Needs at least two ranks with rates.
    """
    if len(rates) < 2:
        return {}
    slow: dict[int, float] = {}
    for key, rate in rates.items():
        others = sorted(r for k, r in rates.items() if k != key)
        mid = len(others) // 2
        median = others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2
        if median > 0 and rate < ratio * median:
            slow[key] = median
    return slow


def slow_by_step_rate(board: RankBoard, now: float) -> dict[tuple[str, int], str]:
    """The running ranks whose step rate falls well behind the others', with the words that
    say so (by node and local rank)."""
    running = [c for c in board.all_cells() if c.state == RankState.RUNNING]
    rates = {i: r for i, c in enumerate(running) if (r := c.progress.rate(now)) is not None}
    slow = stragglers(rates)
    return {
        (running[i].node, running[i].local_rank): (
            f"straggler: {rates[i]:.2f} steps/s, the others {median:.2f}"
        )
        for i, median in slow.items()
    }
