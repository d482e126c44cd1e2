"""Provides the flight-recorder analysis: which ranks never entered which collective.

The node collector reads each rank's dump (torch's pickle of plain containers, read without
torch) and sends its newest entries. Within each process group every rank numbers its
collectives (`collective_seq_id`); the highest number any rank reached is the collective the
job stands in, and the ranks whose own newest number is lower never entered it.
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
        verb = "never entered" if len(self.missing) > 1 else "never entered"
        who = f"rank{'s' if len(self.missing) > 1 else ''} {missing}"
        return f"{who} {verb} collective {self.seq} ({self.op} [{sizes}]) of group {self.pg}"


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
