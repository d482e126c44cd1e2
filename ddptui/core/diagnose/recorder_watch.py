"""Provides RecorderWatch: what every node's flight-recorder dumps say, gathered on their own.

The stall's stacks bring the dumps along (stall.py); a watchdog timeout, or the teardown of a
job that was stuck, gathers the dumps alone. The ranks that never entered a collective the
others wait in (and wait in no other one) are marked on the grid as suspects, with the
collective they missed; the report goes to the root-cause panel and the headless stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddptui.core.diagnose.flight_recorder import analyse, blocked_in, culprits
from ddptui.core.diagnose.stall_events import FlightRecorderReport
from ddptui.core.events import Event
from ddptui.core.monitor.board import RankBoard


class RecorderWatch:
    """The last flight-recorder report of the run, and the grid's marks from it."""

    def __init__(self, board: RankBoard) -> None:
        self.board = board
        self.last: FlightRecorderReport | None = None

    def taken(
        self, reports: Mapping[str, Mapping[str, Any] | str], trigger: str, now: float
    ) -> list[Event]:
        """Every node's collector report (or why there is none) -> the report, the marks."""
        dumps: list[Mapping[str, Any]] = []
        problems: list[str] = []
        for node, sent in reports.items():
            if isinstance(sent, str):
                problems.append(f"{node}: {sent}")
            else:
                dumps += list(sent.get("fr", []))
        gaps = analyse(dumps)
        blocked = blocked_in(dumps)
        odd = culprits(gaps, blocked)
        where: dict[str, list[int]] = {}
        for rank, place in sorted(blocked.items()):
            if rank not in odd:
                where.setdefault(place.describe(), []).append(rank)
        report = FlightRecorderReport(
            trigger,
            tuple(gap.describe() for gap in gaps),
            tuple(sorted(odd)),
            tuple((tuple(ranks), place) for place, ranks in where.items()),
            bool(gaps) and not odd,
            len({d.get("rank") for d in dumps if d.get("rank") is not None}),
            tuple(problems),
            ts=now,
        )
        self.last = report
        missed = {r: gap.describe() for gap in reversed(gaps) for r in gap.missing if r in odd}
        events: list[Event] = []
        for cell in self.board.all_cells():
            if cell.rank in missed and not cell.suspect:
                cell.suspect = True
                events.append(cell.changed(f"flight recorder: {missed[cell.rank]}"))
        return [*events, report]
