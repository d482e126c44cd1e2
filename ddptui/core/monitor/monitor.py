"""Provides the rank state machine: node output in, rank and line events out."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

from ddptui.core.diagnose.patterns import (
    EXITED,
    describe_exit,
    may_report_failure,
    recognise,
)
from ddptui.core.diagnose.recorder_watch import RecorderWatch
from ddptui.core.diagnose.stall import StallWatch
from ddptui.core.diagnose.stall_events import FlightRecorderReport, StallReport
from ddptui.core.events import (
    Diagnosis,
    Event,
    FailureRecord,
    NodeLines,
    RankState,
    RankSummary,
)
from ddptui.core.job.spec import DEFAULT_PROGRESS_PATTERN
from ddptui.core.monitor.agent_log import (
    AgentFact,
    AgentLogParser,
    AgentTrouble,
    Assigned,
    GroupSucceeded,
    WorkerFailed,
)
from ddptui.core.monitor.board import RankBoard
from ddptui.core.monitor.cycles import CycleWatch, MembershipChange, RestartCycle
from ddptui.core.monitor.framing import (
    WORKER_ENDED,
    Attributed,
    LineFramer,
    RankAttributor,
    worker_ended,
)
from ddptui.core.monitor.gpu_watch import GpuWatch
from ddptui.core.monitor.progress import ProgressScanner
from ddptui.core.monitor.rank_cell import TRACEBACK_START as _TRACE_START
from ddptui.core.monitor.rank_cell import RankCell

_LOCAL_RANK = itemgetter(2)


class _NodeReader:
    def __init__(self) -> None:
        self.framer = LineFramer()
        self.attributor = RankAttributor()
        self.agent = AgentLogParser()
        self.seq = 0


@dataclass(frozen=True)
class MonitorSummary:
    """What the monitor concluded: each rank's outcome, the failures (culprit first)."""

    ranks: tuple[RankSummary, ...]
    failures: tuple[FailureRecord, ...]
    culprit: RankSummary | None
    stall: StallReport | None = None
    recorder: FlightRecorderReport | None = None
    cycles: tuple[RestartCycle, ...] = ()


class Monitor:
    """Feeds each node's raw output through framing, attribution and the agent-log parser."""

    def __init__(
        self,
        nodes: Sequence[str],
        nproc_per_node: int,
        progress_pattern: str | None = DEFAULT_PROGRESS_PATTERN,
        max_restarts: int = 0,
    ) -> None:
        self.board = RankBoard(nodes, nproc_per_node)
        self.stall = StallWatch(self.board)
        self.recorder = RecorderWatch(self.board)
        self.gpu = GpuWatch(self.board)
        self.cycles = CycleWatch(max_restarts)
        self._readers = {n: _NodeReader() for n in nodes}
        self._progress = ProgressScanner(progress_pattern) if progress_pattern else None

    # -- what the session asks ------------------------------------------------------------

    def initial_events(self) -> list[Event]:
        """Every rank, pending: the grid's first picture."""
        return self.board.initial_events()

    def tick(self, now: float, hang_timeout: float) -> list[Event]:
        """The checks that time alone triggers: hung ranks, a stalled job, stragglers.

        A StallReport among the events (with no groups yet) asks the session for stacks.
        """
        events = self.board.check_hangs(now, hang_timeout) if hang_timeout > 0 else []
        events += self.stall.check(now, hang_timeout)
        return events + self.board.check_stragglers(now) + self.cycles.tick(now)

    def stacks_taken(
        self, reports: Mapping[str, Mapping[str, Any] | str], now: float | None = None
    ) -> list[Event]:
        """Every node's stacks report (or why there is none): groups, suspects, gaps."""
        return self.stall.stacks_taken(reports, time.time() if now is None else now)

    def gpu_sample(
        self, node: str, record: Mapping[str, Any], now: float | None = None
    ) -> list[Event]:
        """A node's GPU sample (core/node/gpu_sampler.py): its GpuReport, with flags."""
        if node not in self._readers:
            return []
        self.gpu.stalled = self.stall.stalled
        return self.gpu.sample(node, record, time.time() if now is None else now)

    def recorder_taken(
        self, reports: Mapping[str, Mapping[str, Any] | str], trigger: str, now: float | None = None
    ) -> list[Event]:
        """Every node's flight-recorder dumps alone (a watchdog timeout, a teardown)."""
        return self.recorder.taken(reports, trigger, time.time() if now is None else now)

    def stuck(self) -> bool:
        """Whether the job stalled or a rank hung: its teardown gathers the recorder's dumps."""
        hung = any(c.state == RankState.HUNG for c in self.board.all_cells())
        return self.stall.last is not None or hung

    def teardown_started(self) -> None:
        """The operator stops the job: the ranks' ends from now on are its echo, not failures."""
        self.board.tearing_down = True

    def node_exited(
        self, node: str, exit_code: int | None, by_teardown: bool = False
    ) -> list[Event]:
        """The node's agent ended: its ranks not yet final end with it."""
        if exit_code != 0 and not by_teardown and not self.board.tearing_down:
            self.cycles.node_left(node, MembershipChange.LOST, exit_code)
        return self.board.node_exited(node, exit_code, by_teardown)

    def step_rate(self, node: str, local_rank: int, now: float | None = None) -> float | None:
        """The rank's recent progress in steps (or progress lines) per second, None until it
        has printed enough progress lines to tell."""
        cell = self.board.cell(node, local_rank)
        return cell.progress.rate(time.time() if now is None else now) if cell else None

    def winding_down(self, node: str) -> bool:
        """Whether a rank of this node has failed: its agent stops the others and exits."""
        return any(cell.state == RankState.FAILED for cell in self.board.cells.get(node, []))

    def summary(self) -> MonitorSummary:
        """Every rank's outcome and the failure story, for the run's summary."""
        first = self.board.culprit()
        return MonitorSummary(
            tuple(self.board.summaries()),
            tuple(self.board.ordered_failures()),
            first.summary(culprit=True) if first else None,
            self.stall.last,
            self.recorder.last,
            self.cycles.final(),
        )

    # -- node output ----------------------------------------------------------------------

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

        The checks that are rare to fire (failure patterns, tracebacks, srun's task errors,
        the agent's own lines) first look at the whole block at once and run line by line
        only if it may hold one; progress lines are found by one search of the block.
        """
        reader = self._readers[node]
        first = reader.seq + 1
        reader.seq += len(lines)
        events: list[Event] = [NodeLines(node, lines, first, ts=now)]
        texts = [line[0] for line in lines]
        text = "\n".join(texts)
        failures = may_report_failure(text)
        ends = WORKER_ENDED in text
        traces = _TRACE_START in text or any(
            cell.collecting for cell in self.board.cells.get(node, ())
        )
        local_ranks = list(map(_LOCAL_RANK, lines))
        counts = Counter(local_ranks)
        cells: dict[int, RankCell | None] = {}
        if failures or traces or ends or None in counts:
            checks = (failures, failures or traces, ends)
            self._line_by_line(node, lines, first, now, checks, cells, events)
        else:  # rank lines only, nothing to look for in them: count them per rank
            for local_rank in counts:
                rank = lines[local_ranks.index(local_rank)][1]
                assert local_rank is not None and rank is not None
                events += self.board.saw_output(node, rank, local_rank, now)
                cells[local_rank] = self.board.cell(node, local_rank)
        for local_rank, cell in cells.items():
            if cell is not None:
                cell.lines += counts[local_rank] - 1
        if self._progress is not None:
            best = None
            for index, value in self._progress.values(texts, text):
                cell = cells.get(local_ranks[index])
                if cell is not None:
                    cell.progress.observe(now, value)
                    best = value if best is None or value > best else best
            if best is not None:
                self.cycles.step(int(best))
        return events

    def _line_by_line(
        self,
        node: str,
        lines: list[Attributed],
        first: int,
        now: float,
        checks: tuple[bool, bool, bool],
        cells: dict[int, RankCell | None],
        events: list[Event],
    ) -> None:
        """The block's lines one at a time: the agent's lines, trouble, workers' ends.

        `checks`: whether the block may hold a failure, a failure or a traceback, a worker's
        end. Fills `cells` (each rank's cell, looked up at its first line) and `events`.
        """
        failures, rank_lines, ends = checks
        reader = self._readers[node]
        for offset, (line, rank, local_rank) in enumerate(lines):
            if rank is None or local_rank is None:
                for fact in reader.agent.feed(line, first + offset):
                    events += self._agent_fact(node, fact, now)
                continue
            if local_rank in cells:
                cell = cells[local_rank]
            else:
                events += self.board.saw_output(node, rank, local_rank, now)
                cell = cells[local_rank] = self.board.cell(node, local_rank)
            if cell is None:
                continue
            if rank_lines:
                events += self._rank_line(cell, line, first + offset, now, failures)
            ended = worker_ended(line) if ends else None
            if ended is not None:  # a launcher's word on this rank's end (srun direct's)
                code, stopped = ended
                events += self.board.worker_failed(
                    node, WorkerFailed(local_rank, code, rank, not stopped), stopped
                )

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
            return self.board.assign(node, fact, now) + self.cycles.assigned(node, fact, now)
        if isinstance(fact, WorkerFailed):
            if not self.board.tearing_down:
                self.cycles.worker_failed(node, fact)
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
