"""Provides the rank state machine: node output in, rank and line events out."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import replace

from ddptui.core.backends.slurm.srun_output import task_exit
from ddptui.core.events import (
    Diagnosis,
    Event,
    FailureRecord,
    FailureReport,
    NodeLines,
    RankChanged,
    RankState,
    RankSummary,
)
from ddptui.core.monitor.agent_log import (
    AgentFact,
    AgentLogParser,
    AgentTrouble,
    Assigned,
    GroupSucceeded,
    WorkerFailed,
)
from ddptui.core.monitor.diagnosis import (
    DEFAULT_PROGRESS_PATTERN,
    EXITED,
    HUNG,
    RENDEZVOUS_KINDS,
    describe_exit,
    may_report_failure,
    order_failures,
    progress_value,
    recognise,
    signal_name,
    stragglers,
)
from ddptui.core.monitor.framing import Attributed, LineFramer, RankAttributor
from ddptui.core.monitor.rank_cell import TRACEBACK_START as _TRACE_START
from ddptui.core.monitor.rank_cell import RankCell

MAX_FAILURES = 512
_NO_TRACEBACK = ("To enable traceback", "Signal ")


class _NodeReader:
    def __init__(self) -> None:
        self.framer = LineFramer()
        self.attributor = RankAttributor()
        self.agent = AgentLogParser()
        self.seq = 0


_CONSEQUENCE = re.compile(
    r"Connection closed by peer|remote worker crash|Connection reset by peer|"
    r"NCCL communicator was aborted|Broken pipe|SignalException"
)


def _is_consequence(cell: RankCell) -> bool:
    """A rank that failed because another one did, not on its own."""
    if cell.exit_code is not None and cell.exit_code < 0:
        return True
    return bool(_CONSEQUENCE.search(cell.error or ""))


class RankBoard:
    """Every rank of the job, keyed by node and local rank until the rendezvous names them."""

    def __init__(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        self.nodes = list(nodes)
        self.nproc_per_node = nproc_per_node
        self.cells = {n: [RankCell(n, lr) for lr in range(nproc_per_node)] for n in nodes}
        self.first_failure: RankCell | None = None
        self.failures: list[FailureRecord] = []

    def all_cells(self) -> list[RankCell]:
        return [cell for node in self.nodes for cell in self.cells[node]]

    def _move(
        self, cell: RankCell, state: RankState, exit_code: int | None = None, detail: str = ""
    ) -> list[Event]:
        if cell.state == state and exit_code is None:
            return []
        cell.state = state
        if exit_code is not None:
            cell.exit_code = exit_code
        if state == RankState.FAILED and self.first_failure is None:
            self.first_failure = cell
        if state != RankState.RUNNING:
            cell.straggler = False
        return [cell.changed(detail)]

    def diagnose(self, cell: RankCell, diagnosis: Diagnosis) -> list[Event]:
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

    def record_failure(self, node: str, fact: WorkerFailed) -> list[Event]:
        """One entry of torchrun's failure summary, with what the rank itself printed."""
        cell = self.cell(node, fact.local_rank)
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
            error=summary_error or (cell.error if cell else "") or " ".join(fact.traceback[:1]),
            root_cause=fact.root_cause,
        )
        if len(self.failures) < MAX_FAILURES:
            self.failures.append(record)
        return [FailureReport(record)]

    def ordered_failures(self) -> list[FailureRecord]:
        return order_failures(self.failures)

    def initial_events(self) -> list[Event]:
        return [RankChanged(None, c.node, c.local_rank, c.state) for c in self.all_cells()]

    def cell(self, node: str, local_rank: int) -> RankCell | None:
        cells = self.cells.get(node, [])
        return cells[local_rank] if 0 <= local_rank < len(cells) else None

    def assign(self, node: str, fact: Assigned) -> list[Event]:
        events: list[Event] = []
        for local_rank, rank in zip(fact.local_ranks, fact.global_ranks, strict=False):
            cell = self.cell(node, local_rank)
            if cell is None:
                continue
            restarted = fact.restart_count > cell.restarts
            cell.rank, cell.restarts = rank, fact.restart_count
            if cell.state == RankState.PENDING or restarted:
                cell.exit_code = None
                cell.straggler = False
                events += self._move(
                    cell,
                    RankState.ASSIGNED,
                    detail=f"restart {fact.restart_count}" if restarted else "",
                )
        return events

    def saw_output(self, node: str, rank: int, local_rank: int, now: float) -> list[Event]:
        cell = self.cell(node, local_rank)
        if cell is None:
            return []
        cell.last_output = now
        cell.lines += 1
        if cell.rank is None:
            cell.rank = rank
        if cell.state in (RankState.PENDING, RankState.ASSIGNED, RankState.HUNG):
            return self._move(cell, RankState.RUNNING)
        return []

    def root_cause(self) -> RankCell | None:
        """The failure to show first: the first observed one that is not merely a rank
        stopped because another died (SIGTERM from its agent, a peer's closed connection)."""
        first = self.first_failure
        if first is None or not _is_consequence(first):
            return first
        failed = [c for c in self.all_cells() if c.state == RankState.FAILED]
        return next((c for c in failed if not _is_consequence(c)), first)

    def worker_failed(self, node: str, fact: WorkerFailed) -> list[Event]:
        cell = self.cell(node, fact.local_rank)
        if cell is None:
            return []
        if fact.rank is not None:
            cell.rank = fact.rank
        if cell.state == RankState.FAILED and cell.exit_code == fact.exit_code:
            return []
        if fact.root_cause and (
            self.first_failure is None or self.first_failure.exit_code in (-15, None)
        ):
            self.first_failure = cell
        return self._move(cell, RankState.FAILED, fact.exit_code)

    def node_succeeded(self, node: str) -> list[Event]:
        events: list[Event] = []
        for cell in self.cells.get(node, []):
            if not cell.state.final:
                events += self._move(cell, RankState.DONE, 0)
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
                events += self._move(cell, RankState.DONE, 0)
            else:
                why = "stopped by teardown" if by_teardown else f"node agent exited ({exit_code})"
                events += self._move(cell, RankState.FAILED, None, why)
        return events

    def check_hangs(self, now: float, timeout: float) -> list[Event]:
        """A running rank silent for `timeout` while another rank printed since is hung."""
        running = [c for c in self.all_cells() if c.state == RankState.RUNNING]
        if not running:
            return []
        newest = max(c.last_output for c in running)
        events: list[Event] = []
        for cell in running:
            if now - cell.last_output > timeout and newest - cell.last_output > timeout / 2:
                silent = f"silent for {now - cell.last_output:.0f} s while others print"
                cell.add_diagnosis(Diagnosis(HUNG, f"hung: {silent}"))
                events += self._move(cell, RankState.HUNG, detail=silent)
        return events

    def check_stragglers(self, now: float) -> list[Event]:
        """A running rank whose step rate falls well behind the others' is a straggler."""
        running = [c for c in self.all_cells() if c.state == RankState.RUNNING]
        rates = {i: r for i, c in enumerate(running) if (r := c.progress.rate(now)) is not None}
        slow = stragglers(rates)
        events: list[Event] = []
        for index, cell in enumerate(running):
            flagged = index in slow
            if flagged == cell.straggler:
                continue
            cell.straggler = flagged
            detail = (
                f"straggler: {rates[index]:.2f} steps/s, the others {slow[index]:.2f}"
                if flagged
                else "keeps pace again"
            )
            events.append(cell.changed(detail))
        return events

    def summaries(self) -> list[RankSummary]:
        return [c.summary() for c in self.all_cells()]


class Monitor:
    """Feeds each node's raw output through framing, attribution and the agent-log parser."""

    def __init__(
        self,
        nodes: Sequence[str],
        nproc_per_node: int,
        progress_pattern: str | None = DEFAULT_PROGRESS_PATTERN,
    ) -> None:
        self.board = RankBoard(nodes, nproc_per_node)
        self._readers = {n: _NodeReader() for n in nodes}
        self._progress = re.compile(progress_pattern) if progress_pattern else None

    def feed(self, node: str, chunk: bytes, now: float | None = None) -> list[Event]:
        reader = self._readers[node]
        block = reader.framer.block(chunk)
        if block is None:
            return []
        lines = reader.attributor.feed_block(block)
        return self._lines(node, lines, time.time() if now is None else now)

    def feed_lines(self, node: str, lines: Sequence[str], now: float | None = None) -> list[Event]:
        if not lines:
            return []
        attributed = self._readers[node].attributor.feed_block("\n".join(lines))
        return self._lines(node, attributed, time.time() if now is None else now)

    def end_of_output(self, node: str) -> list[Event]:
        """Flush fragments when a node's stream ends; nothing buffered is ever dropped."""
        reader = self._readers[node]
        now = time.time()
        lines = [item for line in reader.framer.flush() for item in reader.attributor.feed(line)]
        lines += reader.attributor.flush()
        events = self._lines(node, lines, now) if lines else []
        for fact in reader.agent.flush():
            events += self._agent_fact(node, fact, now)
        return events

    def _lines(self, node: str, lines: list[Attributed], now: float) -> list[Event]:
        """One NodeLines event for the block, then what its lines say, in line order.

        The checks that are rare to fire (failure patterns, tracebacks, srun's task errors)
        first look at the whole block at once and run line by line only if it may hold one.
        """
        reader = self._readers[node]
        first = reader.seq + 1
        reader.seq += len(lines)
        events: list[Event] = [NodeLines(node, lines, first, ts=now)]
        text = "\n".join([line[0] for line in lines])
        failures = may_report_failure(text)
        srun = "srun: error: " in text
        traces = _TRACE_START in text or any(
            cell.collecting for cell in self.board.cells.get(node, ())
        )
        progress = self._progress
        seen: dict[int, int] = {}
        cells: dict[int, RankCell | None] = {}
        for offset, (line, rank, local_rank) in enumerate(lines):
            if rank is None or local_rank is None:
                for fact in reader.agent.feed(line, first + offset):
                    events += self._agent_fact(node, fact, now)
                continue
            if local_rank in seen:
                seen[local_rank] += 1
                cell = cells[local_rank]
            else:
                seen[local_rank] = 1
                events += self.board.saw_output(node, rank, local_rank, now)
                cell = cells[local_rank] = self.board.cell(node, local_rank)
            if cell is None:
                continue
            if progress is not None:
                value = progress_value(progress, line)
                if value is not None:
                    cell.progress.observe(now, value)
            if failures or traces:
                events += self._rank_line(cell, line, first + offset, now, failures)
            ended = task_exit(line) if srun and line.startswith("srun: error: ") else None
            if ended is not None:  # srun direct: srun's line about this rank's task (srunlog.py)
                code, root_cause = ended
                events += self.board.worker_failed(
                    node, WorkerFailed(local_rank, code, rank, root_cause)
                )
        for local_rank, count in seen.items():
            if (cell := cells[local_rank]) is not None:
                cell.lines += count - 1
        return events

    def _rank_line(
        self, cell: RankCell, text: str, seq: int, now: float, failures: bool
    ) -> list[Event]:
        """What one of the rank's own lines says: trouble, or a finished traceback."""
        events: list[Event] = []
        said = recognise(text, seq) if failures else None
        for diagnosis in (said, cell.note_line(text, seq)):
            if diagnosis is not None:
                events += self.board.diagnose(cell, replace(diagnosis, ts=now))
        return events

    def _agent_fact(self, node: str, fact: AgentFact, now: float) -> list[Event]:
        if isinstance(fact, Assigned):
            return self.board.assign(node, fact)
        if isinstance(fact, WorkerFailed):
            events = self.board.worker_failed(node, fact)
            if fact.from_summary:
                events += self.board.record_failure(node, fact)
            cell = self.board.cell(node, fact.local_rank)
            if fact.seq is not None and cell is not None:
                said = f"the worker ended: {describe_exit(fact.exit_code)}"
                events += self.board.diagnose(cell, Diagnosis(EXITED, said, "", fact.seq, now))
            return events
        if isinstance(fact, AgentTrouble):
            return self.board.node_trouble(node, replace(fact.diagnosis, ts=now))
        assert isinstance(fact, GroupSucceeded)
        return self.board.node_succeeded(node)
