"""Provides RankBoard: every rank of the job and the moves between their states."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from ddptui.core.events import (
    Diagnosis,
    Event,
    FailureRecord,
    RankChanged,
    RankState,
)
from ddptui.core.monitor.agent_log import Assigned, WorkerFailed
from ddptui.core.monitor.causes import MISMATCH, STOPPED, TEARDOWN
from ddptui.core.monitor.last_words import is_boilerplate, says_error, shown_error
from ddptui.core.monitor.patterns import (
    PEER_LOST,
    RENDEZVOUS_KINDS,
    explaining_lines,
    signal_name,
)
from ddptui.core.monitor.rank_cell import RankCell

MAX_FAILURES = 512
_NO_TRACEBACK = ("To enable traceback", "Signal ")


class RankBoard:
    """Every rank of the job, keyed by node and local rank until the rendezvous names them."""

    def __init__(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        self.nodes = list(nodes)
        self.nproc_per_node = nproc_per_node
        self.cells = {n: [RankCell(n, lr) for lr in range(nproc_per_node)] for n in nodes}
        self.failures: list[FailureRecord] = []
        self._failed = 0
        self.last_progress = 0.0  # when a rank last progressed (or was assigned)
        self.tearing_down = False  # the operator's teardown began: what follows is its echo

    def all_cells(self) -> list[RankCell]:
        return [cell for node in self.nodes for cell in self.cells[node]]

    def move(
        self, cell: RankCell, state: RankState, exit_code: int | None = None, detail: str = ""
    ) -> list[Event]:
        if cell.state == state and exit_code is None:
            return []
        cell.state = state
        if exit_code is not None:
            cell.exit_code = exit_code
        if state == RankState.FAILED and cell.failed_order is None:
            self._failed += 1
            cell.failed_order = self._failed
        if state != RankState.RUNNING:
            cell.straggler = False
        return [cell.changed(detail)]

    def diagnose(self, cell: RankCell, diagnosis: Diagnosis) -> list[Event]:
        if self.tearing_down and diagnosis.kind == PEER_LOST:
            return []  # the teardown closed those connections, not a dead peer
        return [cell.changed()] if cell.add_diagnosis(diagnosis) else []

    def node_trouble(self, node: str, diagnosis: Diagnosis) -> list[Event]:
        """The agent reports a problem: before the rendezvous, it is every waiting rank's."""
        if diagnosis.kind not in RENDEZVOUS_KINDS:
            return []
        events: list[Event] = []
        for cell in self.cells.get(node, []):
            if cell.state == RankState.PENDING:
                events += self.diagnose(cell, diagnosis)
        return events

    def record_failure(
        self, node: str, fact: WorkerFailed
    ) -> tuple[FailureRecord | None, list[Event]]:
        """One entry of torchrun's failure summary, with what the rank itself printed, and
        what its error file says beyond the exception line; none while the operator tears the
        job down (its stops are no failures of the job)."""
        cell = self.cell(node, fact.local_rank)
        if self.tearing_down:
            return None, []
        summary_error = next(
            (
                line.strip()
                for line in reversed(fact.traceback)
                if line.strip() and not line.startswith(" ")
            ),
            "",
        )
        if summary_error.startswith(_NO_TRACEBACK) or summary_error.startswith("Traceback"):
            summary_error = ""
        record = FailureRecord(
            node=node,
            rank=fact.rank,
            local_rank=fact.local_rank,
            exit_code=fact.exit_code,
            signal=signal_name(fact.exit_code),
            host=fact.host,
            time=fact.time,
            pid=fact.pid,
            error_file=fact.error_file,
            traceback=fact.traceback,
            error=_own_words(
                summary_error or (cell.error if cell else "") or " ".join(fact.traceback[:1]),
                tuple(cell.last_lines) if cell else (),
            ),
            first_on_node=fact.root_cause,
        )
        if len(self.failures) >= MAX_FAILURES:
            return None, []
        if cell is not None and not cell.error and not is_boilerplate(record.error):
            cell.error = record.error  # its own last words (a missing script): no traceback
        self.failures.append(record)
        events: list[Event] = []
        if cell is not None:  # what the error file says beyond the exception line
            for diagnosis in explaining_lines(fact.traceback):
                events += self.diagnose(cell, diagnosis)
        return record, events

    def initial_events(self) -> list[Event]:
        return [RankChanged(None, c.node, c.local_rank, c.state) for c in self.all_cells()]

    def cell(self, node: str, local_rank: int) -> RankCell | None:
        cells = self.cells.get(node, [])
        return cells[local_rank] if 0 <= local_rank < len(cells) else None

    def assign(self, node: str, fact: Assigned, now: float | None = None) -> list[Event]:
        events: list[Event] = []
        for local_rank, rank in zip(fact.local_ranks, fact.global_ranks, strict=False):
            cell = self.cell(node, local_rank)
            if cell is None:
                continue
            # every round after its first restarted it: torchrun counts a restart only on the
            # agent whose worker failed, the others' workers restart with the group all the same
            restarts = max(fact.restart_count, cell.restarts + (cell.rounds > 0))
            cell.rounds += 1
            restarted = restarts > cell.restarts
            renumbered = cell.rank is not None and cell.rank != rank
            was = cell.rank
            cell.rank, cell.restarts = rank, restarts
            self.last_progress = max(self.last_progress, time.time() if now is None else now)
            said = "; ".join(
                ([f"restart {restarts}"] if restarted else [])
                + ([f"rank {was} is now rank {rank}"] if renumbered else [])  # a new number
            )
            if cell.state == RankState.PENDING or restarted:
                cell.exit_code = None
                cell.straggler = False
                cell.failed_order = None
                cell.known_cause = ""
                moved = self.move(cell, RankState.ASSIGNED, detail=said)
                events += moved or ([cell.changed(said)] if said else [])
            elif renumbered:
                events.append(cell.changed(said))
        return events

    def saw_output(
        self, node: str, rank: int, local_rank: int, now: float, progressed: bool = True
    ) -> list[Event]:
        """A rank printed. Only `progressed` output (a step, a line of the user's own, not
        torch's or NCCL's chatter: monitor/chatter.py) counts as progress: chatter neither
        ends a stall nor wakes a hung rank."""
        cell = self.cell(node, local_rank)
        if cell is None:
            return []
        cell.lines += 1
        if cell.rank is None:
            cell.rank = rank
        if not progressed:
            if cell.state in (RankState.PENDING, RankState.ASSIGNED):
                return self.move(cell, RankState.RUNNING)  # alive, though no step yet
            return []
        cell.last_output = now
        self.last_progress = max(self.last_progress, now)
        if cell.state in (RankState.PENDING, RankState.ASSIGNED, RankState.HUNG):
            return self.move(cell, RankState.RUNNING)
        return []

    def worker_failed(self, node: str, fact: WorkerFailed, stopped: bool = False) -> list[Event]:
        """A worker ended with a failure; `stopped`: its launcher stopped it (srun's SIGTERM)."""
        cell = self.cell(node, fact.local_rank)
        if cell is None:
            return []
        if fact.rank is not None:
            cell.rank = fact.rank
        if cell.state == RankState.FAILED and cell.exit_code == fact.exit_code:
            return []
        if self.tearing_down:
            return self.stopped_by_teardown(cell, fact.exit_code)
        if stopped and not cell.known_cause:
            cell.known_cause = STOPPED
        return self.move(cell, RankState.FAILED, fact.exit_code)

    def stopped_by_teardown(self, cell: RankCell, exit_code: int | None) -> list[Event]:
        """The operator's teardown ended this rank: stopped, not failed (an outcome it had
        before the teardown stays)."""
        if cell.state.final:
            return []
        if cell.known_cause != MISMATCH:  # the audit's word outlives the teardown
            cell.known_cause = TEARDOWN
        return self.move(cell, RankState.STOPPED, exit_code, "stopped by teardown")

    def node_succeeded(self, node: str) -> list[Event]:
        events: list[Event] = []
        for cell in self.cells.get(node, []):
            if not cell.state.final:
                events += self.move(cell, RankState.DONE, 0)
        return events

    def node_exited(
        self, node: str, exit_code: int | None, by_teardown: bool = False
    ) -> list[Event]:
        """The agent is gone: ranks not yet final are done (exit 0) or failed (stopped)."""
        events: list[Event] = []
        for cell in self.cells.get(node, []):
            if cell.state.final:
                continue
            if exit_code == 0:
                events += self.move(cell, RankState.DONE, 0)
            elif by_teardown or self.tearing_down:
                events += self.stopped_by_teardown(cell, None)
            else:
                events += self.move(
                    cell, RankState.FAILED, None, f"node agent exited ({exit_code})"
                )
        return events

    def node_restarting(self, node: str, attempts: str) -> list[Event]:
        """The node's agent restarts its worker group: its ranks wait for the next round,
        restarting, not failed (those that failed keep their exit and cause in the story)."""
        if self.tearing_down:
            return []
        said = f"restarting ({attempts} attempts left)" if attempts else "restarting: nodes join"
        events: list[Event] = []
        for cell in self.cells.get(node, []):
            if cell.state in (RankState.DONE, RankState.STOPPED, RankState.PENDING):
                continue
            events += self.move(cell, RankState.RESTARTING, detail=said)
        return events

    def mark_stragglers(self, slow: Mapping[tuple[str, int], str]) -> list[Event]:
        """A judge named these running ranks slow (by node and local rank), each with its
        words, and no other: the rank events of those whose mark changed say so."""
        events: list[Event] = []
        for cell in self.all_cells():
            key = (cell.node, cell.local_rank)
            flagged = key in slow and cell.state == RankState.RUNNING
            if flagged == cell.straggler:
                continue
            cell.straggler = flagged
            events.append(cell.changed(slow[key] if flagged else "keeps pace again"))
        return events


def _own_words(said: str, last_lines: Sequence[str]) -> str:
    """The rank's own last error line over torchrun's boilerplate; a signal's words stay
    unless the rank said something that reads as an error (its last step line says less)."""
    own = shown_error(said, last_lines)
    if said.startswith("Signal ") and not says_error(own):
        return said
    return own
