"""Provides AuditWatch: the run's one collective audit, fed with records, told as events.

The ranks' collective records come from two places: the flight-recorder dumps the node
collector already gathers (a stall's stacks, a watchdog timeout, the teardown of a job that
stuck or failed) and, at a low rate while the job runs, the worker hook's live channel. Both
reach `JobWatch.collectives_seen(node, records)`, which lands here: one `CollectiveAudit` per
run matches them by (group, number). A mismatch becomes a `MismatchReport` (the headless
`{"event": "mismatch", ...}`); its odd ranks are marked on the grid, their cause is
`collective_mismatch` (the odd rank, not the rank gloo aborted on receiving the odd size),
and the session takes the stacks of the ranks while they live.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.core.diagnose.audit import CollectiveAudit, CollectiveMismatch
from ddptui.core.diagnose.signatures import COLLECTIVE_MISMATCH
from ddptui.core.events import Event
from ddptui.core.monitor.board import RankBoard
from ddptui.core.monitor.collective_record import CollectiveRecord, records_from_dump

NCCL_DUMP = "fr_nccl_rank_"  # NCCL's recorder; a rank's other file is the one gloo fills


@dataclass(frozen=True)
class MismatchReport(Event):
    """Ranks disagree on a collective. The headless contract: `{"event": "mismatch", "ts",
    "collective", "kind": "op"|"size"|"dtype"|"ranks"|"skipped"|"deadlock", "ranks": {rank:
    what it passed}, "pg", "seq", "culprits", "detail", "source"}`."""

    mismatch: CollectiveMismatch
    source: str = ""  # where the records came from: "live", "stall", "watchdog", "teardown"

    kind = "mismatch"

    def to_dict(self) -> dict[str, Any]:
        return {**self.mismatch.to_dict(), "ts": self.ts, "source": self.source}


def records_of_dumps(dumps: Iterable[Mapping[str, Any]]) -> list[CollectiveRecord]:
    """Every rank's records from the collector's dumps (`{"file", "rank", "entries", ...}`):
    NCCL's recorder where a rank has it, else the one gloo fills."""
    chosen: dict[int, Mapping[str, Any]] = {}
    for dump in dumps:
        rank = dump.get("rank")
        if not isinstance(rank, int):
            continue
        nccl = str(dump.get("file", "")).startswith(NCCL_DUMP)
        if rank not in chosen or nccl:
            chosen[rank] = dump
    records: list[CollectiveRecord] = []
    for rank, dump in sorted(chosen.items()):
        records += records_from_dump(dump, rank)
    return records


def nccl_of(dumps: Iterable[Mapping[str, Any]]) -> tuple[int, ...] | None:
    """NCCL's version from the job's NCCL dumps (`comm_lib_version` "2.28.9"), if any."""
    for dump in dumps:
        version = str(dump.get("comm_lib_version") or "")
        if str(dump.get("file", "")).startswith(NCCL_DUMP) and version[:1].isdigit():
            parts = version.split("+")[0].split(".")
            if all(p.isdigit() for p in parts):
                return tuple(int(p) for p in parts)
    return None


class AuditWatch:
    """The run's collective audit and what it marked on the board."""

    def __init__(self, board: RankBoard, world: int) -> None:
        self.board = board
        self.audit = CollectiveAudit(world=tuple(range(world)))
        self._told_causes: set[tuple[str, ...]] = set()

    @property
    def mismatches(self) -> list[CollectiveMismatch]:
        return list(self.audit.mismatches)

    def seen(self, records: Sequence[CollectiveRecord], source: str, now: float) -> list[Event]:
        """New records (in each rank's order; repeats are ignored): the mismatches they show."""
        return self._told(self.audit.feed(sorted(records, key=_order)), source, now)

    def settle(self, source: str, now: float) -> list[Event]:
        """The job stands still or ended: collectives some rank never entered, as mismatches
        (said, and judged by the verdict; the stall's own marks on the grid stay)."""
        return self._told(self.audit.settle(), source, now, mark=False)

    def died_in(self, dead: set[int], now: float) -> list[Event]:
        """Ranks died of a peer's odd collective (gloo's receiver): the living ranks that
        changed what they pass there are the odd ones (`CollectiveAudit.died_in`)."""
        return self._told(self.audit.died_in(dead), "failure", now) if dead else []

    def culprits(self) -> set[int]:
        return {rank for m in self.audit.mismatches for rank in m.culprits}

    def _told(
        self, found: Sequence[CollectiveMismatch], source: str, now: float, mark: bool = True
    ) -> list[Event]:
        events: list[Event] = []
        for mismatch in found:
            if not self._new_cause(mismatch):
                continue
            for cell in self.board.all_cells() if mark else ():
                if cell.rank not in mismatch.culprits or cell.known_cause == COLLECTIVE_MISMATCH:
                    continue
                cell.known_cause = COLLECTIVE_MISMATCH
                cell.suspect = True
                events.append(cell.changed(mismatch.describe()))
            events.append(MismatchReport(mismatch, source, ts=now))
        return events

    def _new_cause(self, mismatch: CollectiveMismatch) -> bool:
        """Once per cause: the odd ranks' kind of mismatch in their group. Once NCCL's ranks
        disagree, every later collective of the group disagrees too (each side waits in a
        different one), with no odd rank of its own: those repeat the first, unsaid."""
        group = (mismatch.pg,)
        cause = (mismatch.pg, str(mismatch.kind), *map(str, mismatch.culprits))
        if cause in self._told_causes or (not mismatch.culprits and group in self._told_causes):
            return False
        self._told_causes |= {cause, group}
        return True


def _order(record: CollectiveRecord) -> tuple[int, str, int]:
    return (record.rank, record.pg, record.seq)
