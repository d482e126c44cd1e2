"""Provides PreflightGrid: nodes by checks, each cell coloured by its result."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

from ddptui.core.preflight.preflight import CHECKS, CheckResult

PENDING = "…"
_LOOK = {
    "ok": ("✓ ok", "bold green"),
    "warn": ("! warn", "bold yellow"),
    "fail": ("✗ FAIL", "bold white on red"),
    "skip": ("- skip", "dim"),
}


def cell_text(result: CheckResult | None) -> Text:
    if result is None:
        return Text(PENDING, style="dim")
    label, style = _LOOK.get(result.status, (result.status, ""))
    return Text(label, style=style)


class PreflightGrid(DataTable[Text]):
    """The screen adds nodes as they are known and hands it each result."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="cell", zebra_stripes=True)
        self.results: dict[tuple[str, str], CheckResult] = {}
        self.nodes: list[str] = []

    def on_mount(self) -> None:
        self.add_column(Text("node", style="bold"), key="node")
        for check in CHECKS:
            self.add_column(Text(check, style="bold"), key=check, width=max(len(check), 7))

    def set_nodes(self, nodes: Sequence[str]) -> None:
        for node in nodes:
            if node not in self.nodes:
                self.nodes.append(node)
                cells = [cell_text(self.results.get((node, c))) for c in CHECKS]
                self.add_row(Text(node, style="bold"), *cells, key=node)

    def show(self, result: CheckResult) -> None:
        self.results[(result.node, result.check)] = result
        if result.node not in self.nodes:
            self.set_nodes([result.node])
        self.update_cell(result.node, result.check, cell_text(result))

    def reset(self) -> None:
        self.results.clear()
        self.nodes.clear()
        self.clear()

    def status(self, node: str, check: str) -> str | None:
        found = self.results.get((node, check))
        return found.status if found else None

    def result_at_cursor(self) -> CheckResult | None:
        row, column = self.cursor_coordinate
        if not 0 <= row < len(self.nodes) or column == 0:
            return None
        return self.results.get((self.nodes[row], CHECKS[column - 1]))
