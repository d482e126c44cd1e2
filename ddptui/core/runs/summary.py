"""Provides RunSummary: the last event of a run, its outcome and where its records are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddptui.core.diagnose.stall_events import FlightRecorderReport, StallReport
from ddptui.core.events import Event, FailureRecord, RankSummary, plain
from ddptui.core.monitor.cycles import RestartCycle


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
    stopped_by: str = "finished"  # finished | failure | operator | detached | error
    failures: tuple[FailureRecord, ...] = ()  # the first observed failure first
    stall: StallReport | None = None  # the last stall the run had
    flight_recorder: FlightRecorderReport | None = None  # its last dumps gathered on their own
    cycles: tuple[RestartCycle, ...] = ()  # the rendezvous rounds (restart cycles), in order

    kind = "summary"

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["stall"] = self.stall.to_dict() if self.stall else None
        recorder = self.flight_recorder
        data["flight_recorder"] = recorder.to_dict() if recorder else None
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
