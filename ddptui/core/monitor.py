"""Provides the rank state machine: node output in, rank and line events out."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ddptui.core.agentlog import AgentLogParser, Assigned, GroupSucceeded, WorkerFailed
from ddptui.core.events import Event, NodeLine, RankChanged, RankState, RankSummary
from ddptui.core.lines import LineFramer, RankAttributor
from ddptui.core.srunlog import task_exit

_TRACE_START = re.compile(r"Traceback \(most recent call last\):")
_TORCH_RANK_TAG = re.compile(r"^\[rank\d+\]: ?")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::(?: |$)|$)")  # `ValueError: x`
MAX_TRACEBACK = 60


@dataclass
class RankCell:
    """One (node, local rank) position of the grid."""

    node: str
    local_rank: int
    rank: int | None = None
    state: RankState = RankState.PENDING
    exit_code: int | None = None
    error: str = ""
    traceback: list[str] = field(default_factory=list)
    last_output: float = 0.0
    lines: int = 0
    restarts: int = 0
    _collecting: bool = False

    def summary(self) -> RankSummary:
        return RankSummary(
            self.rank,
            self.node,
            self.local_rank,
            self.state,
            self.exit_code,
            self.error,
            tuple(self.traceback),
        )

    def note_line(self, text: str) -> None:
        """Keep the first Python traceback this rank prints, and its exception line."""
        body = _TORCH_RANK_TAG.sub("", text, count=1)
        start = _TRACE_START.search(body)
        if start:
            if not self.traceback:
                self._collecting = True
                self.traceback.append(body[start.start() :].strip())
            return
        if self._collecting:
            if body[:1] not in (" ", "\t") and not _EXCEPTION_LINE.match(body):
                return  # a stdout line read between the traceback's stderr lines
            self.traceback.append(body.rstrip())
            if body[:1] not in (" ", "\t") or len(self.traceback) >= MAX_TRACEBACK:
                self._collecting = False
                self.error = body.strip()


class _NodeReader:
    def __init__(self) -> None:
        self.framer = LineFramer()
        self.attributor = RankAttributor()
        self.agent = AgentLogParser()


class RankBoard:
    """Every rank of the job, keyed by node and local rank until the rendezvous names them."""

    def __init__(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        self.nodes = list(nodes)
        self.nproc_per_node = nproc_per_node
        self.cells = {n: [RankCell(n, lr) for lr in range(nproc_per_node)] for n in nodes}
        self.first_failure: RankCell | None = None

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
        return [
            RankChanged(
                cell.rank, cell.node, cell.local_rank, state, cell.exit_code, detail or cell.error
            )
        ]

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
                events += self._move(
                    cell, RankState.HUNG, detail=f"silent for {now - cell.last_output:.0f} s"
                )
        return events

    def summaries(self) -> list[RankSummary]:
        return [c.summary() for c in self.all_cells()]


class Monitor:
    """Feeds each node's raw output through framing, attribution and the agent-log parser."""

    def __init__(self, nodes: Sequence[str], nproc_per_node: int) -> None:
        self.board = RankBoard(nodes, nproc_per_node)
        self._readers = {n: _NodeReader() for n in nodes}

    def feed(self, node: str, chunk: bytes, now: float | None = None) -> list[Event]:
        reader = self._readers[node]
        return self._lines(node, reader.framer.feed(chunk), now or time.time())

    def feed_lines(self, node: str, lines: Sequence[str], now: float | None = None) -> list[Event]:
        return self._lines(node, lines, now or time.time())

    def end_of_output(self, node: str) -> list[Event]:
        """Flush fragments when a node's stream ends; nothing buffered is ever dropped."""
        reader = self._readers[node]
        now = time.time()
        events = self._lines(node, reader.framer.flush(), now)
        for item in reader.attributor.flush():
            events += self._attributed(node, item.text, item.rank, item.local_rank, now)
        for fact in reader.agent.flush():
            events += self._agent_fact(node, fact)
        return events

    def _lines(self, node: str, lines: Sequence[str], now: float) -> list[Event]:
        reader = self._readers[node]
        events: list[Event] = []
        for line in lines:
            for item in reader.attributor.feed(line):
                events += self._attributed(node, item.text, item.rank, item.local_rank, now)
        return events

    def _attributed(
        self, node: str, text: str, rank: int | None, local_rank: int | None, now: float
    ) -> list[Event]:
        events: list[Event] = [NodeLine(node, text, rank, local_rank, ts=now)]
        if rank is None or local_rank is None:
            for fact in self._readers[node].agent.feed(text):
                events += self._agent_fact(node, fact)
            return events
        events += self.board.saw_output(node, rank, local_rank, now)
        cell = self.board.cell(node, local_rank)
        if cell is not None:
            cell.note_line(text)
        ended = task_exit(text) if text.startswith("srun: error: ") else None
        if ended is not None:  # srun direct: srun's line about this rank's task (srunlog.py)
            code, root_cause = ended
            events += self.board.worker_failed(
                node, WorkerFailed(local_rank, code, rank, root_cause)
            )
        return events

    def _agent_fact(self, node: str, fact: Assigned | WorkerFailed | GroupSucceeded) -> list[Event]:
        if isinstance(fact, Assigned):
            return self.board.assign(node, fact)
        if isinstance(fact, WorkerFailed):
            return self.board.worker_failed(node, fact)
        return self.board.node_succeeded(node)
