"""Provides RankNavigation: the job screen's ways to a rank — its first error line (`E`),
going to a node or rank by name (`J`), the chosen rank's details."""

from __future__ import annotations

from collections.abc import Mapping

from textual.screen import Screen

from ddptui.core.diagnose.failures import jump_targets
from ddptui.core.events import RankChanged
from ddptui.core.runs.run_dir import node_log_name
from ddptui.core.session.process import SessionProcess
from ddptui.ui.widgets.grid_cells import find_cell
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from ddptui.ui.widgets.rank_details import RankDetails
from ddptui.ui.widgets.rank_grid import RankGrid
from ddptui.ui.widgets.root_cause import RootCausePanel


class RankNavigation(Screen[None]):
    """Mixed into the job screen, which owns the grid, the logs, the details and the rest."""

    grid: RankGrid
    logs: NodeLogDeck
    details: RankDetails
    root_cause: RootCausePanel
    ranks: Mapping[tuple[str, int], RankChanged]
    selected: tuple[str, int] | None
    session: SessionProcess | None
    _jumps: int

    def action_jump_error(self) -> None:
        """Show the first error line of the chosen rank, else of each failed rank in turn.

        The order is the failures' (first observed first); each press moves on to the next.
        """
        targets = jump_targets(self.ranks, self.root_cause.failures)
        chosen = [t for t in targets if (t.node, t.local_rank) == self.selected]
        if self.selected is not None and not chosen:
            node, local_rank = self.selected
            self.notify(f"{node} local rank {local_rank} has no error line", timeout=4)
            return
        if not targets:
            self.notify("no rank has an error line (yet)", timeout=3)
            return
        if chosen:
            target = chosen[0]
        else:
            target = targets[self._jumps % len(targets)]
            self._jumps += 1
        who = f"rank {target.rank} on {target.node}" if target.rank is not None else target.node
        if self.logs.jump_to(target.node, target.seq):
            self.notify(f"{who}: {target.summary}", timeout=6)
            return
        where = self._node_log_path(target.node)
        self.notify(
            f"{who}: its first error line ({target.seq}) is older than the console keeps; "
            f"the full log is {where}",
            severity="warning",
            timeout=10,
        )

    def go_to(self, target: str) -> None:
        """Choose the rank `target` names (`local1`, `local1/2`, `r5`), show it in the grid
        and its node's log."""
        cell = find_cell(self.grid.rows, target)
        if cell is None:
            self.notify(f"no node or rank {target!r}", severity="error")
            return
        self._choose((cell.node, cell.local_rank))
        line = self.grid.line_of(cell.node, cell.local_rank)
        if line is not None:
            y = self.grid.virtual_region.y + line
            self.query_one("#side").scroll_to(y=max(0, y - 2), animate=False)
        self.logs.show(cell.node)

    def _choose(self, chosen: tuple[str, int] | None) -> None:
        self.selected = chosen
        self.grid.select(*(chosen or (None, 0)))
        self._show_details()

    def refresh_details(self) -> None:
        """The chosen rank's details again (its step rate moves while its state stays)."""
        if self.selected is not None:
            self._show_details()

    def _show_details(self) -> None:
        cell = self.grid.cell(*self.selected) if self.selected is not None else None
        last, rate = None, None
        if cell is not None:
            last = self.logs.store.last_text(cell.node, cell.rank)
            if self.session is not None:
                rate = self.session.step_rate(cell.node, cell.local_rank)
        self.details.show_rank(cell, last, rate)

    def _node_log_path(self, node: str) -> str:
        if self.session is None or self.session.plan is None:
            return "in the run directory"
        index = list(self.session.plan.node_names).index(node)
        return str(self.session.run.nodes_dir / node_log_name(index, node))
