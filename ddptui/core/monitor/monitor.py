"""Provides the rank state machine: node output in, rank and line events out."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any

from ddptui.core.events import (
    Diagnosis,
    Event,
    FailureRecord,
    FailureReport,
    MetricSampled,
    NodeLines,
    RankChanged,
    RankState,
    RankSummary,
    RendezvousAsked,
    WorldJoined,
)
from ddptui.core.job.spec import DEFAULT_PROGRESS_PATTERN
from ddptui.core.metrics.wrong_numbers import WrongNumber, WrongNumberKind
from ddptui.core.monitor.agent_log import (
    AgentFact,
    AgentLogParser,
    AgentTrouble,
    Assigned,
    Configured,
    GroupRestarting,
    GroupSucceeded,
    WorkerFailed,
)
from ddptui.core.monitor.board import RankBoard
from ddptui.core.monitor.chatter import idle_ranks, may_hold_chatter
from ddptui.core.monitor.cycles import CycleWatch, MembershipChange, RestartCycle
from ddptui.core.monitor.framing import (
    WORKER_ENDED,
    Attributed,
    LineFramer,
    RankAttributor,
    worker_ended,
)
from ddptui.core.monitor.lighthouse import LighthouseWatch, QuorumChange
from ddptui.core.monitor.metric_watch import METRIC_INTERVAL_S, MetricWatch, Sampled
from ddptui.core.monitor.patterns import (
    EXITED,
    LOSS_SPIKE,
    NAN_OR_INF,
    describe_exit,
    may_report_failure,
    recognise,
)
from ddptui.core.monitor.progress import ProgressScanner
from ddptui.core.monitor.rank_cell import TRACEBACK_START as _TRACE_START
from ddptui.core.monitor.rank_cell import RankCell, keep_last_lines

_LOCAL_RANK = itemgetter(2)
_new = tuple.__new__
_WRONG_KIND = {WrongNumberKind.NAN_OR_INF: NAN_OR_INF, WrongNumberKind.LOSS_SPIKE: LOSS_SPIKE}


class _NodeReader:
    def __init__(self, base: int = 0) -> None:
        self.framer = LineFramer()
        self.attributor = RankAttributor()
        self.agent = AgentLogParser()
        self.seq = 0
        self.base = base  # added to the node's ranks: a torchft replica group's first rank

    def lines(self, block: str) -> list[Attributed]:
        """The block's lines, each with its rank in the job."""
        return self.shifted(self.attributor.feed_block(block))

    def shifted(self, lines: list[Attributed]) -> list[Attributed]:
        base = self.base
        if not base:
            return lines
        return [
            _new(Attributed, (text, rank + base if rank is not None else None, local))
            for text, rank, local in lines
        ]

    def fact(self, fact: AgentFact) -> AgentFact:
        """The agent's word with its ranks in the job (a replica group's agent numbers its
        workers from 0)."""
        base = self.base
        if base and isinstance(fact, Assigned):
            return replace(fact, global_ranks=tuple(r + base for r in fact.global_ranks))
        if base and isinstance(fact, WorkerFailed) and fact.rank is not None:
            return replace(fact, rank=fact.rank + base)
        return fact


def at_line(events: list[Event], seq: int) -> list[Event]:
    """`events`, each rank change marked with the node's line that made it (`seq`), where a
    log view places its note when the change reaches the screen after later lines."""
    return [replace(e, seq=seq) if isinstance(e, RankChanged) else e for e in events]


@dataclass(frozen=True)
class MonitorSummary:
    """What the run's reading and judging concluded: each rank's outcome, the failures
    (culprit first), and the judges' last reports (diagnose/job_watch.py fills those)."""

    ranks: tuple[RankSummary, ...]
    failures: tuple[FailureRecord, ...]
    culprit: RankSummary | None
    stall: Any = None  # diagnose's StallReport
    recorder: Any = None  # diagnose's FlightRecorderReport
    straggler: Any = None  # diagnose's StragglerReport
    metrics: dict[str, float] = field(default_factory=dict)  # MetricStore.summary()
    cycles: tuple[RestartCycle, ...] = ()
    quorums: tuple[QuorumChange, ...] = ()  # a torchft job's changes of quorum membership


def wrong_number_diagnosis(wrong: WrongNumber, line: str, seq: int, now: float) -> Diagnosis:
    """A wrong number as the rank's diagnosis: what the grid, the details and the failure
    story (cause `nan_or_inf`) carry."""
    return Diagnosis(_WRONG_KIND[wrong.kind], wrong.said(), line, seq, now)


class Monitor:
    """Reads each node's raw output (framing, attribution, the agent-log parser) and keeps
    every rank's state; it judges nothing. What the state means is diagnose's
    (`core/diagnose/job_watch.py`'s JobWatch runs the judges over it, through the four hooks
    below: who spoke, a new round, the events of each block, a failure reported)."""

    def __init__(
        self,
        nodes: Sequence[str],
        nproc_per_node: int,
        progress_pattern: str | None = DEFAULT_PROGRESS_PATTERN,
        metric_patterns: Mapping[str, str] | None = None,
        metrics: bool = True,
        metric_interval: float = METRIC_INTERVAL_S,
        max_restarts: int = 0,
        replica_groups: bool = False,
    ) -> None:
        """`replica_groups`: a torchft job, each node a replica group of its own whose
        torchrun numbers its ranks from 0 (shown from the node's first rank in the job on),
        the first node's unprefixed lines the Lighthouse's (the quorums, as they come)."""
        self.nodes = tuple(nodes)
        self.world = len(nodes) * nproc_per_node
        self.board = RankBoard(nodes, nproc_per_node)
        self.cycles = CycleWatch(max_restarts)
        self._readers = {
            n: _NodeReader(i * nproc_per_node if replica_groups else 0) for i, n in enumerate(nodes)
        }
        self.lighthouse = LighthouseWatch() if replica_groups else None
        # One world of ranks: its rendezvous rounds, its collectives audited across ranks. A
        # torchft job's groups are worlds of their own, numbered from 0 each (its quorums
        # tell its story instead).
        self.one_world = not replica_groups
        self._progress = ProgressScanner(progress_pattern) if progress_pattern else None
        self.progress_line = self._progress.line_pattern if self._progress else None
        self.metric_watch = MetricWatch(metric_patterns, metric_interval) if metrics else None

    # -- the judges' hooks (JobWatch's) ------------------------------------------------------

    def _spoke(
        self, key: tuple[str, int], rank: int | None, now: float, said: str, stepped: bool
    ) -> list[Event]:
        """A rank printed a line of its own (`said`, its last), a progress line or not."""
        return []

    def _new_round(self, world_size: int) -> None:
        """A rendezvous round after the first: its ranks are numbered again."""

    def _judged(self, events: list[Event], now: float, force: bool = False) -> list[Event]:
        """What the judges add to a block's events."""
        return events

    def failure_reported(self, node: str, fact: WorkerFailed) -> list[Event]:
        """An entry of torchrun's failure summary: the rank's record, and what it says."""
        record, said = self.board.record_failure(node, fact)
        return said + (self._failed(record) if record is not None else [])

    def _failed(self, record: FailureRecord) -> list[Event]:
        """An entry of torchrun's failure summary, read: the failures so far, as they came
        (which went first is the judges' to say)."""
        return [FailureReport(record, tuple(self.board.failures))]

    # -- what the session asks ------------------------------------------------------------

    def initial_events(self) -> list[Event]:
        """Every rank, pending: the grid's first picture."""
        return self.board.initial_events()

    def tick(self, now: float, hang_timeout: float = 0) -> list[Event]:
        """What time alone brings out of what was read: metrics due, an elastic round's end
        of waiting (JobWatch adds the judges' checks)."""
        events: list[Event] = []
        if self.metric_watch is not None:
            events += self._metric_events(self.metric_watch.due(now))
        return events + self.cycles.tick(now)

    def knows(self, node: str) -> bool:
        return node in self._readers

    def teardown_started(self) -> None:
        """The operator stops the job: the ranks' ends from now on are its echo, not failures."""
        self.board.tearing_down = True

    def node_exited(
        self, node: str, exit_code: int | None, by_teardown: bool = False
    ) -> list[Event]:
        """The node's agent ended: its ranks not yet final end with it."""
        if exit_code != 0 and not by_teardown and not self.board.tearing_down and self.one_world:
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
        """Every rank's outcome and the failures as they came (no culprit: that is judged)."""
        return MonitorSummary(
            tuple(c.summary() for c in self.board.all_cells()),
            tuple(self.board.failures),
            None,
            metrics=self.metric_watch.store.summary() if self.metric_watch else {},
            cycles=self.cycles.final(),
            quorums=tuple(self.lighthouse.changes) if self.lighthouse else (),
        )

    # -- node output ----------------------------------------------------------------------

    def feed(self, node: str, chunk: bytes, now: float | None = None) -> list[Event]:
        reader = self._readers[node]
        block = reader.framer.block(chunk)
        if block is None:
            return []
        lines = reader.lines(block)
        now = time.time() if now is None else now
        return self._judged(self._lines(node, lines, now), now)

    def feed_lines(self, node: str, lines: Sequence[str], now: float | None = None) -> list[Event]:
        if not lines:
            return []
        attributed = self._readers[node].lines("\n".join(lines))
        now = time.time() if now is None else now
        return self._judged(self._lines(node, attributed, now), now)

    def end_of_output(self, node: str) -> list[Event]:
        """Flush fragments when a node's stream ends; nothing buffered is ever dropped."""
        reader = self._readers[node]
        now = time.time()
        lines = [item for line in reader.framer.flush() for item in reader.attributor.feed(line)]
        lines = reader.shifted(lines + reader.attributor.flush())
        events = self._lines(node, lines, now) if lines else []
        for fact in reader.agent.flush():
            events += self._agent_fact(node, reader.fact(fact), now)
        if self.metric_watch is not None:
            events += self._metric_events(self.metric_watch.due(now, node))
        return self._judged(events, now)

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
        # the ranks whose lines here are all torch's, NCCL's or ddptui's: printed, no progress
        idle = idle_ranks(texts, local_ranks) if may_hold_chatter(text) else frozenset()
        if failures or traces or ends or None in counts:
            checks = (failures, failures or traces, ends)
            self._line_by_line(node, lines, first, now, checks, cells, events, idle)
        else:  # rank lines only, nothing to look for in them: count them per rank
            for local_rank in counts:
                rank = lines[local_ranks.index(local_rank)][1]
                assert local_rank is not None and rank is not None
                progressed = local_rank not in idle
                events += self.board.saw_output(node, rank, local_rank, now, progressed)
                cells[local_rank] = self.board.cell(node, local_rank)
            keep_last_lines(texts, local_ranks, cells)
        for local_rank, cell in cells.items():
            if cell is not None:
                cell.lines += counts[local_rank] - 1
        stepped: set[int | None] = set()
        if self._progress is not None:
            best = None
            for index, value in self._progress.values(texts, text):
                cell = cells.get(local_ranks[index])
                if cell is not None:
                    cell.progress.observe(now, value)
                    stepped.add(local_ranks[index])
                    best = value if best is None or value > best else best
            if best is not None and self.one_world:
                self.cycles.step(int(best))
        for local_rank, cell in cells.items():  # the job's rhythm: who progressed, after what
            if cell is not None and local_rank not in idle:
                said = cell.last_lines[-1] if cell.last_lines else ""
                key = (node, local_rank)
                events += self._spoke(key, cell.rank, now, said, local_rank in stepped)
        if self.metric_watch is not None:
            found = self.metric_watch.block(node, lines, first, now, text)
            events += self._metric_events(found)
        return events

    def _metric_events(self, found: list[Sampled]) -> list[Event]:
        """A MetricSampled per sample; a wrong number marks its rank (the grid, its details,
        the failure story's cause `nan_or_inf`)."""
        events: list[Event] = []
        for item in found:
            sample = item.sample
            events.append(MetricSampled(sample.rank, sample.step, sample.values, ts=sample.ts))
            cell = (
                self.board.cell(item.node, item.local_rank)
                if item.wrong and item.local_rank is not None
                else None
            )
            for wrong in item.wrong if cell is not None else ():
                assert cell is not None
                said = wrong_number_diagnosis(wrong, item.line, item.seq, sample.ts)
                events += self.board.diagnose(cell, said)
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
        idle: frozenset[int | None] = frozenset(),
    ) -> None:
        """The block's lines one at a time: the agent's lines, trouble, workers' ends.

        `checks`: whether the block may hold a failure, a failure or a traceback, a worker's
        end. Fills `cells` (each rank's cell, looked up at its first line) and `events`.
        """
        failures, rank_lines, ends = checks
        reader = self._readers[node]
        lighthouse = self.lighthouse
        for offset, (line, rank, local_rank) in enumerate(lines):
            if rank is None or local_rank is None:
                if lighthouse is not None and "torchft::lighthouse" in line:
                    quorum = lighthouse.report(line, now)
                    events += [quorum] if quorum is not None else []
                    continue
                for fact in reader.agent.feed(line, first + offset):
                    events += at_line(
                        self._agent_fact(node, reader.fact(fact), now), first + offset
                    )
                continue
            if local_rank in cells:
                cell = cells[local_rank]
            else:
                progressed = local_rank not in idle
                said = self.board.saw_output(node, rank, local_rank, now, progressed)
                events += at_line(said, first + offset) if said else said
                cell = cells[local_rank] = self.board.cell(node, local_rank)
            if cell is None:
                continue
            cell.last_lines.append(line)  # before the agent's word on its end, below
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
        if isinstance(fact, Configured):
            return [
                RendezvousAsked(node, fact.run_id, fact.endpoint, fact.min_nodes, fact.max_nodes)
            ]
        if isinstance(fact, Assigned):
            events = self.board.assign(node, fact, now)
            rounds = len(self.cycles.cycles)
            events += self.cycles.assigned(node, fact, now) if self.one_world else []
            if len(self.cycles.cycles) > rounds > 0 and fact.world_size > 0:
                self._new_round(fact.world_size)
            if fact.nodes >= 0:
                joined = WorldJoined(
                    node, fact.group_rank, fact.nodes, fact.world_size, fact.master_addr
                )
                events.append(joined)
            return events
        if isinstance(fact, WorkerFailed):
            if not self.board.tearing_down and self.one_world:
                self.cycles.worker_failed(node, fact)
            events = self.board.worker_failed(node, fact)
            if fact.from_summary:
                events += self.failure_reported(node, fact)
            cell = self.board.cell(node, fact.local_rank)
            if fact.seq is not None and cell is not None:
                said = f"the worker ended: {describe_exit(fact.exit_code)}"
                events += self.board.diagnose(cell, Diagnosis(EXITED, said, "", fact.seq, now))
            return events
        if isinstance(fact, AgentTrouble):
            return self.board.node_trouble(node, replace(fact.diagnosis, ts=now))
        if isinstance(fact, GroupRestarting):
            return self.board.node_restarting(node, fact.attempts)
        assert isinstance(fact, GroupSucceeded)
        return self.board.node_succeeded(node)
