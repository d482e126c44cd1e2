"""Provides BoardView: what the diagnoses read from the run's rank board and mark on it.

The monitor's `RankBoard` and its `RankCell`s satisfy these; the diagnoses stand below the
monitor and never import it, so a judge can be tried on any board that keeps these promises.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from ddptui.core.events import Event, RankChanged, RankState


class CellView(Protocol):
    """One rank as the diagnoses see it: its state, whether it printed, and their marks."""

    rank: int | None
    state: RankState
    lines: int  # the lines it printed so far
    stall_cause: str  # what the stall's stacks said of it
    known_cause: str  # a cause known outright (the teardown, the collective audit's)
    suspect: bool

    def changed(self, detail: str = "") -> RankChanged:
        """The event that tells the grid this rank's marks changed."""
        ...


C = TypeVar("C", bound=CellView)


class BoardView(Protocol[C]):
    """Every rank of the run, when one last progressed, and whether the teardown began."""

    last_progress: float
    tearing_down: bool

    def all_cells(self) -> list[C]: ...

    def move(
        self, cell: C, state: RankState, exit_code: int | None = None, detail: str = ""
    ) -> list[Event]: ...
