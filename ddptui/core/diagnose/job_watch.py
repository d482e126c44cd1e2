"""Provides JobWatch: the judges run over what the monitor reads and keeps.

The monitor (core/monitor/) reads node output and keeps every rank's state; it judges
nothing. JobWatch is that monitor with the judges beside it: a stall and its stacks, the
flight recorder's dumps, the collective audit, the straggler watch, the learned rhythm and
its silence budgets, the GPU flags, and the one verdict. It hears the monitor through four
hooks (a rank spoke, a new round began, a block's events are in, a failure was reported:
its place in the story) and answers what time
alone, stacks, dumps, collective records and GPU samples bring.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ddptui.core.diagnose.audit import CollectiveMismatch
from ddptui.core.diagnose.audit_watch import (
    AuditWatch,
    MismatchReport,
    nccl_of,
    records_of_dumps,
)
from ddptui.core.diagnose.failures import (
    culprit_cell,
    failure_report,
    ordered_failures,
    rank_summaries,
)
from ddptui.core.diagnose.gpu_watch import GpuWatch
from ddptui.core.diagnose.nccl_ras import RasReport
from ddptui.core.diagnose.rank_checks import check_hangs, slow_by_step_rate
from ddptui.core.diagnose.recorder_watch import RecorderWatch
from ddptui.core.diagnose.rhythm import JobRhythm
from ddptui.core.diagnose.signatures import SIZE_RECEIVED
from ddptui.core.diagnose.speed import SpeedWatch, StragglerReport
from ddptui.core.diagnose.stall import ACTIVE, StallWatch
from ddptui.core.diagnose.verdict import VerdictReport
from ddptui.core.diagnose.verdict_watch import VerdictWatch
from ddptui.core.events import Event, FailureRecord, FailureReport, RankState
from ddptui.core.monitor.clock import ClockOffset
from ddptui.core.monitor.collective_record import CollectiveRecord
from ddptui.core.monitor.monitor import Monitor, MonitorSummary
from ddptui.core.monitor.patterns import progress_value


class JobWatch(Monitor):
    """The monitor with its judges: node output in, rank, line and finding events out."""

    def __init__(self, *reading: Any, **settings: Any) -> None:
        """The monitor's own arguments: nodes, ranks per node, progress and metric patterns,
        restarts, replica groups."""
        super().__init__(*reading, **settings)
        self.stall = StallWatch(self.board)
        self.recorder = RecorderWatch(self.board)
        self.gpu = GpuWatch(self.board)
        self.audit = AuditWatch(self.board, self.world)
        self.verdicts = VerdictWatch(self.board)
        self.speed = SpeedWatch(self.world or None)
        self._nccl: tuple[int, ...] | None = None
        step = self.progress_line
        self.rhythm = JobRhythm(
            (lambda line: progress_value(step, line) is not None) if step else lambda line: False
        )

    # -- the monitor's hooks ----------------------------------------------------------------

    def _spoke(
        self, key: tuple[str, int], rank: int | None, now: float, said: str, stepped: bool
    ) -> list[Event]:
        return self.rhythm.spoke(key, rank, now, said, stepped)

    def _new_round(self, world_size: int) -> None:
        # its ranks are numbered again, its collectives counted from 1
        self.audit = AuditWatch(self.board, world_size)

    def _judged(self, events: list[Event], now: float, force: bool = False) -> list[Event]:
        """The events, and the verdict after them if they change the failure's story."""
        if self.one_world:
            events = events + self.audit.died_in(self._died_of_a_peers_size(), now)
        if force or any(isinstance(e, (FailureReport, MismatchReport)) for e in events):
            return events + list(self.verdicts.changed(self.audit.mismatches, now))
        return events

    def _failed(self, record: FailureRecord) -> list[Event]:
        return [failure_report(self.board, record)]

    # -- what time alone triggers -------------------------------------------------------------

    def tick(self, now: float, hang_timeout: float = 0) -> list[Event]:
        """The checks that time alone triggers: hung ranks, a stalled job, stragglers.

        A StallReport among the events (with no groups yet) asks the session for stacks.
        """
        keys = [(c.node, c.local_rank) for c in self.board.all_cells() if c.state in ACTIVE]
        events = self.rhythm.tick(now, hang_timeout, keys)
        if hang_timeout > 0:  # each rank's budget, learned (diagnose/rhythm.py); 0: off
            budgets = {key: self.rhythm.budget(key, hang_timeout) for key in keys}
            events += check_hangs(self.board, now, hang_timeout, budgets)
            events += self.stall.check(now, self.rhythm.job_budget(hang_timeout, keys))
        else:
            events += self.stall.check(now, hang_timeout)
        named = self.speed.check(now, self.gpu.latest)
        events += named
        if self.metric_watch is not None:
            events += self._metric_events(self.metric_watch.due(now))
        return events + self._stragglers(now, named) + self.cycles.tick(now)

    def _stragglers(self, now: float, named: list[Event]) -> list[Event]:
        """One judge of who is slow: the speed watch, from the collectives the others wait
        in, once it has scored; the step rate only before (a job whose collectives are not
        sampled). A torchft job has none: its groups heal at their own pace."""
        if not self.one_world:
            return []
        if not self.speed.scored:
            return self.board.mark_stragglers(slow_by_step_rate(self.board, now))
        report = next((e for e in named if isinstance(e, StragglerReport)), None)
        if report is None:
            return []
        slow = {
            (c.node, c.local_rank): next(
                (e for e in report.evidence if e.startswith(f"rank {c.rank} ")), "straggler"
            )
            for c in self.board.all_cells()
            if c.rank in report.ranks
        }
        return self.board.mark_stragglers(slow)

    # -- what the session gathers -----------------------------------------------------------

    def collectives(self, node: str, line: Any, now: float | None = None) -> list[Event]:
        """One line of a rank's collectives file, as the node's stream carried it: to the
        straggler watch, and its records to the collective audit."""
        if not self.knows(node) or not self.one_world:
            return []
        return self.collectives_seen(node, self.speed.sample(node, line), now)

    def clock_offset(self, node: str, offset: ClockOffset) -> None:
        """A node's clock offset from the console's, for its collectives from now on."""
        self.speed.set_offset(node, offset)

    def stacks_taken(
        self, reports: Mapping[str, Mapping[str, Any] | str], now: float | None = None
    ) -> list[Event]:
        """Every node's stacks report (or why there is none): groups, suspects, gaps."""
        now = time.time() if now is None else now
        events = self.stall.stacks_taken(reports, now)
        events += self._audit_dumps(reports, "stall", now)
        if self.stall.stalled:  # who never entered what the others wait in, said once
            events += self.audit.settle("stall", now)
        return self._judged(events, now, force=self.stall.stalled)

    def collectives_seen(
        self,
        node: str,
        records: Sequence[CollectiveRecord],
        now: float | None = None,
        source: str = "live",
    ) -> list[Event]:
        """A node's ranks' collective records (the flight recorder's, from its dumps or the
        worker hook's live channel): the collective audit's mismatches, the odd ranks marked.
        Records may repeat and come late: each rank's are matched once, in its own order."""
        if not self.knows(node) or not records or not self.one_world:
            return []
        current = self.cycles.current
        if current is not None and current.index > 0 and node not in current.nodes:
            return []  # a node the round went on without (its orphaned workers' last records)
        now = time.time() if now is None else now
        return self._judged(self.audit.seen(records, source, now), now)

    def _died_of_a_peers_size(self) -> set[int]:
        """Ranks that failed on receiving more than they expected (gloo's enforce: the
        peer's collective was bigger): they died in that collective, before recording it."""
        return {
            cell.rank
            for cell in self.board.all_cells()
            if cell.rank is not None
            and cell.state == RankState.FAILED
            and any(SIZE_RECEIVED in line for line in (cell.error, *cell.last_lines))
        }

    def mismatches(self) -> list[CollectiveMismatch]:
        """What the collective audit found so far."""
        return self.audit.mismatches

    def ras_taken(self, report: RasReport) -> list[Event]:
        """What NCCL's RAS said of the nodes on a stall: evidence beside the stall's verdict."""
        for node, lines in report.nodes:
            self.verdicts.ras_said(node, lines)
        return self._judged([report], report.ts, force=True)

    @property
    def nccl_version(self) -> tuple[int, ...] | None:
        """The job's NCCL version, from its flight-recorder dumps (None: not on NCCL, or
        no dump seen yet)."""
        return self._nccl

    def final_verdict(self, now: float | None = None) -> VerdictReport | None:
        """The run's one verdict at its end: None when no rank failed and nothing else
        (a mismatch, a stall) says something went wrong."""
        return self.verdicts.final(self.audit.mismatches, time.time() if now is None else now)

    def dumps_audited(
        self, reports: Mapping[str, Mapping[str, Any] | str], source: str
    ) -> list[Event]:
        """Every node's flight-recorder dumps, for the collective audit alone (a failure's)."""
        now = time.time()
        return self._judged(self._audit_dumps(reports, source, now), now)

    def _audit_dumps(
        self, reports: Mapping[str, Mapping[str, Any] | str], source: str, now: float
    ) -> list[Event]:
        events: list[Event] = []
        for node, report in reports.items():
            if not isinstance(report, str):
                self._nccl = self._nccl or nccl_of(report.get("fr", []))
                records = records_of_dumps(report.get("fr", []))
                events += self.collectives_seen(node, records, now, source)
        return events

    def gpu_sample(
        self, node: str, record: Mapping[str, Any], now: float | None = None
    ) -> list[Event]:
        """A node's GPU sample (core/node/gpu_sampler.py): its GpuReport, with flags."""
        if not self.knows(node):
            return []
        self.gpu.stalled = self.stall.stalled
        return self.gpu.sample(node, record, time.time() if now is None else now)

    def recorder_taken(
        self, reports: Mapping[str, Mapping[str, Any] | str], trigger: str, now: float | None = None
    ) -> list[Event]:
        """Every node's flight-recorder dumps alone (a watchdog timeout, a teardown)."""
        now = time.time() if now is None else now
        events = self.recorder.taken(reports, trigger, now)
        return self._judged(events + self._audit_dumps(reports, trigger, now), now)

    def stuck(self) -> bool:
        """Whether the job stalled or a rank hung: its teardown gathers the recorder's dumps."""
        hung = any(c.state == RankState.HUNG for c in self.board.all_cells())
        return self.stall.last is not None or hung

    def summary(self) -> MonitorSummary:
        """Every rank's outcome, the failure story, and the judges' last reports."""
        first = culprit_cell(self.board)
        return replace(
            super().summary(),
            ranks=tuple(rank_summaries(self.board)),
            failures=tuple(ordered_failures(self.board)),
            culprit=first.summary(culprit=True) if first else None,
            stall=self.stall.last,
            recorder=self.recorder.last,
            straggler=self.speed.last,
        )
