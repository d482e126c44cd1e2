"""Provides VerdictWatch: the run's one verdict, judged from the rank board, the audit and RAS.

`diagnose.verdict.judge` is pure; this is where the monitor's state becomes its input (each
rank's cause, kinds, error, traceback and last lines; the audit's mismatches; what NCCL's RAS
said of the nodes on a stall) and where it is said: again only when the failure's story
changes it, and once more, final, at the end of a failed run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ddptui.core.diagnose.audit import CollectiveMismatch
from ddptui.core.diagnose.failures import culprit_cell
from ddptui.core.diagnose.verdict import MAX_EVIDENCE, RankFacts, Verdict, VerdictReport, judge
from ddptui.core.events import RankState
from ddptui.core.monitor.board import RankBoard
from ddptui.core.monitor.last_words import shown_error
from ddptui.core.monitor.rank_cell import RankCell

MAX_FACT_LINES = 24


def rank_facts(cell: RankCell, culprit: bool) -> RankFacts:
    """What the verdict needs of one rank: its cause if it ended badly, else ""."""
    cause = cell.cause
    if cell.state not in (RankState.FAILED, RankState.STOPPED) and cell.known_cause == "":
        cause = ""
    if cause == "finished":
        cause = ""
    error = shown_error(cell.error, tuple(cell.last_lines)) if cause else cell.error
    lines = [error, *cell.traceback[-MAX_FACT_LINES:], *cell.last_lines]
    lines += [d.line or d.summary for d in cell.diagnoses]
    return RankFacts(
        cell.node,
        cell.local_rank,
        cell.rank,
        cause,
        culprit,
        tuple(d.kind for d in cell.diagnoses),
        tuple(line for line in lines if line),
        cell.exit_code,
    )


class VerdictWatch:
    """The last verdict said, and what NCCL's RAS said of the nodes (folded in as evidence)."""

    def __init__(self, board: RankBoard) -> None:
        self.board = board
        self.said: Verdict | None = None
        self.ras: dict[str, tuple[str, ...]] = {}  # node -> what RAS said, in lines

    def judge(self, mismatches: Sequence[CollectiveMismatch]) -> Verdict | None:
        first = culprit_cell(self.board)
        facts = [rank_facts(c, c is first) for c in self.board.all_cells()]
        verdict = judge(facts, mismatches=mismatches)
        if verdict is None or not self.ras:
            return verdict
        # RAS is never trusted alone (NVIDIA/nccl#1730: it said OK during a watchdog
        # timeout): its lines are evidence beside the verdict, never the verdict itself
        said = [f"NCCL RAS ({node}): {line}" for node, lines in self.ras.items() for line in lines]
        room = max(2, MAX_EVIDENCE - len(said))
        return replace(verdict, evidence=(*verdict.evidence[:room], *said[:MAX_EVIDENCE]))

    def changed(self, mismatches: Sequence[CollectiveMismatch], now: float) -> list[VerdictReport]:
        """The verdict, if the failure's story changed it since it was last said."""
        verdict = self.judge(mismatches)
        if verdict is None or verdict == self.said:
            return []
        self.said = verdict
        return [VerdictReport(verdict, ts=now)]

    def final(self, mismatches: Sequence[CollectiveMismatch], now: float) -> VerdictReport | None:
        """The run's verdict at its end (None when nothing failed, mismatched or stalled)."""
        verdict = self.judge(mismatches)
        if verdict is None:
            return None
        self.said = verdict
        return VerdictReport(verdict, final=True, ts=now)

    def ras_said(self, node: str, lines: Sequence[str]) -> None:
        self.ras[node] = tuple(lines)
