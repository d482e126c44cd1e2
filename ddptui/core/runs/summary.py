"""Provides RunSummary: the last event of a run, its outcome and where its records are."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddptui.core.diagnose.speed import StragglerReport
from ddptui.core.diagnose.stall_events import FlightRecorderReport, StallReport
from ddptui.core.diagnose.verdict import Verdict
from ddptui.core.events import (
    Event,
    FailureRecord,
    RankSummary,
    StopReason,
    plain,
    plain_number,
)
from ddptui.core.monitor.cycles import RestartCycle
from ddptui.core.monitor.lighthouse import QuorumChange
from ddptui.core.story.goodput import Goodput
from ddptui.core.story.incident import Incident


@dataclass(frozen=True)
class RunSummary(Event):
    """The last event of a run: its outcome and where its records are."""

    ok: bool
    world_size: int
    ranks: tuple[RankSummary, ...]
    run_dir: str
    run_id: str
    detail: str = ""
    detached: bool = False
    stopped_by: StopReason = StopReason.FINISHED
    failures: tuple[FailureRecord, ...] = ()  # the first observed failure first
    stall: StallReport | None = None  # the last stall the run had
    flight_recorder: FlightRecorderReport | None = None  # its last dumps gathered on their own
    verdict: Verdict | None = None  # the failure's one verdict (diagnose/verdict.py)
    straggler: StragglerReport | None = None  # the last straggler event the run sent
    # The run's metrics in a few numbers (MetricStore.summary): `loss.last`, `loss.best`,
    # `samples/s.mean`, ...; a last value may be NaN (the run ended on a wrong number).
    metrics: dict[str, float] = field(default_factory=dict)
    cycles: tuple[RestartCycle, ...] = ()  # the rendezvous rounds (restart cycles), in order
    quorums: tuple[QuorumChange, ...] = ()  # a torchft job's quorum changes, in order
    # The story (core/story): every incident in order, and the line every surface opens with
    # (the first line of `detail`).
    incidents: tuple[Incident, ...] = ()
    headline: str = ""
    # Where the wall time went (core/story/goodput.py): stepping, launch, restarts, stalls...
    goodput: Goodput | None = None

    kind = "summary"
    followed = True

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["stall"] = self.stall.to_dict() if self.stall else None
        recorder = self.flight_recorder
        data["flight_recorder"] = recorder.to_dict() if recorder else None
        verdict = self.verdict.to_dict() if self.verdict else None
        data["verdict"] = {k: v for k, v in verdict.items() if k != "event"} if verdict else None
        data["straggler"] = self.straggler.to_dict() if self.straggler else None
        data["metrics"] = {name: plain_number(v) for name, v in self.metrics.items()}
        data["incidents"] = [incident.to_dict() for incident in self.incidents]
        data["goodput"] = self.goodput.to_dict() if self.goodput else None
        data["ranks"] = [
            {
                "rank": r.rank,
                "node": r.node,
                "local_rank": r.local_rank,
                "state": r.state.value,
                "exit_code": r.exit_code,
                "error": r.error,
                "traceback": list(r.traceback),
                "diagnoses": plain(r.diagnoses),
                "restarts": r.restarts,
                "cause": r.cause,
                "culprit": r.culprit,
            }
            for r in self.ranks
        ]
        return data
