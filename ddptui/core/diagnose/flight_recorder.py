"""Provides the flight-recorder analysis: which ranks never entered which collective.

The node collector reads each rank's dump (torch's pickle of plain containers, read without
torch) and sends its newest entries. Within each process group every rank numbers its
collectives (`collective_seq_id`); the highest number any rank reached is the collective the
job stands in, and the ranks whose own newest number is lower never entered it. A rank that
never entered it because it waits in a collective of another group is no culprit: when every
such rank waits elsewhere, the groups wait on each other (a deadlock).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CollectiveGap:
    """Collective `seq` of process group `pg`: who entered it and who never did."""

    pg: str
    seq: int
    op: str  # "nccl:all_reduce", "gloo:all_reduce"
    sizes: tuple[tuple[int, ...], ...]
    entered: tuple[int, ...]
    missing: tuple[int, ...]
    last_seen: Mapping[int, int]  # rank -> its newest collective number in this group

    def describe(self) -> str:
        sizes = ", ".join("x".join(map(str, s)) for s in self.sizes) or "-"
        missing = ", ".join(map(str, self.missing))
        who = f"rank{'s' if len(self.missing) > 1 else ''} {missing}"
        return f"{who} never entered collective {self.seq} ({self.op} [{sizes}]) of group {self.pg}"


@dataclass(frozen=True)
class Blocked:
    """The collective a rank entered last: where it waits, if it waits in one."""

    pg: str
    seq: int
    op: str

    def describe(self) -> str:
        return f"collective {self.seq} ({self.op}) of group {self.pg}"


def blocked_in(dumps: Iterable[Mapping[str, Any]]) -> dict[int, Blocked]:
    """Each rank's newest collective over every group, unless it completed (gloo leaves its
    entries `scheduled` even once done: there the newest one is taken as waited in)."""
    out: dict[int, tuple[int, int, Blocked | None]] = {}
    for dump in dumps:
        rank = dump.get("rank")
        if rank is None:
            continue
        for index, entry in enumerate(dump.get("entries", [])):
            if entry.get("is_p2p") or entry.get("collective_seq_id") is None:
                continue
            key = (int(entry.get("time_created_ns") or 0), index)
            if rank not in out or key >= out[rank][:2]:
                where = Blocked(
                    str(entry.get("pg_id")),
                    int(entry["collective_seq_id"]),
                    str(entry.get("profiling_name") or "?"),
                )
                out[rank] = (*key, None if entry.get("state") == "completed" else where)
    return {rank: where for rank, (_, _, where) in out.items() if where is not None}


def culprits(gaps: Iterable[CollectiveGap], blocked: Mapping[int, Blocked]) -> set[int]:
    """The ranks missing from a collective that do not wait in another group's collective."""
    return {
        rank
        for gap in gaps
        for rank in gap.missing
        if rank not in blocked or blocked[rank].pg == gap.pg
    }


def analyse(dumps: Iterable[Mapping[str, Any]]) -> list[CollectiveGap]:
    """The gaps in each process group, the lowest collective number first."""
    newest: dict[str, dict[int, Mapping[str, Any]]] = {}
    seen: dict[str, dict[int, Mapping[str, Any]]] = {}
    for dump in dumps:
        rank = dump.get("rank")
        if rank is None:
            continue
        for entry in dump.get("entries", []):
            if entry.get("is_p2p") or entry.get("collective_seq_id") is None:
                continue
            pg = str(entry.get("pg_id"))
            ranks = newest.setdefault(pg, {})
            seq = int(entry["collective_seq_id"])
            if rank not in ranks or seq > int(ranks[rank]["collective_seq_id"]):
                ranks[rank] = entry
            seen.setdefault(pg, {}).setdefault(seq, entry)
    gaps = []
    for pg, ranks in newest.items():
        last = {rank: int(entry["collective_seq_id"]) for rank, entry in ranks.items()}
        top = max(last.values())
        missing = tuple(sorted(r for r, s in last.items() if s < top))
        if not missing:
            continue
        entry = seen[pg][top]
        gaps.append(
            CollectiveGap(
                pg,
                top,
                str(entry.get("profiling_name") or "?"),
                tuple(tuple(int(n) for n in size) for size in entry.get("input_sizes") or ()),
                tuple(sorted(r for r, s in last.items() if s == top)),
                missing,
                last,
            )
        )
    return sorted(gaps, key=lambda g: (g.seq, g.pg))
