"""Provides the collective records a rank's flight recorder keeps, read from its dumps.

torch's flight recorder (gloo and NCCL alike) keeps one entry per collective a rank issued:
its group, its number in that group (`collective_seq_id`), the op (`profiling_name`), input
and output sizes and dtypes, its state and, with stack traces, the Python frames that issued
it. A dump is torch's pickle (`_dump_fr_trace`) or JSON (`_dump_fr_trace_json`) of plain
containers, or the node collector's trimmed copy of its newest entries; all read the same.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Sizes = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class CollectiveRecord:
    """One rank's record of one collective, as its flight recorder keeps it.

    `ranks` are the group's global ranks where the dump says (NCCL's `pg_config`; gloo's is
    empty), `site` the user's call site (`file:line`, the first frame outside torch), empty
    when the dump has no stacks.
    """

    rank: int
    pg: str
    seq: int
    op: str  # profiling_name: "nccl:all_reduce", "gloo:broadcast"
    input_sizes: Sizes = ()
    output_sizes: Sizes = ()
    input_dtypes: tuple[str, ...] = ()
    output_dtypes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    state: str = "scheduled"
    site: str = ""
    record_id: int = -1

    @property
    def collective(self) -> str:
        """The op without its backend: `all_reduce`."""
        return self.op.split(":", 1)[-1].split(" ", 1)[0]

    def signature_of(self, fields: Sequence[str]) -> tuple[object, ...]:
        """What must agree across ranks: the op, input sizes and dtypes, and of the optional
        fields (`OPTIONAL`) those named."""
        return (
            self.collective,
            self.input_sizes,
            self.input_dtypes,
            *(getattr(self, name) for name in fields),
        )

    def describe(self) -> str:
        """`all_reduce [8] Float`: what this rank passed."""
        sizes = ", ".join("x".join(map(str, s)) or "scalar" for s in self.input_sizes)
        dtypes = "/".join(dict.fromkeys(self.input_dtypes + self.output_dtypes))
        return " ".join(p for p in (self.collective, f"[{sizes}]", dtypes) if p)


# What one source of records may not know: the live rows have no output dtypes, gloo's dumps
# and the live rows no group ranks. Records are compared on the fields all of them know.
OPTIONAL = ("output_sizes", "output_dtypes", "ranks")


def known_fields(records: Iterable[CollectiveRecord]) -> tuple[str, ...]:
    """The optional fields every one of `records` knows (not empty)."""
    records = list(records)
    return tuple(name for name in OPTIONAL if all(getattr(r, name) for r in records))


def _sizes(value: Any) -> Sizes:
    return tuple(tuple(int(n) for n in size) for size in value or ())


def _group_ranks(config: Mapping[str, Any], pg: str, desc: str) -> tuple[int, ...]:
    """A group's ranks from a dump's `pg_config` (keyed by name; its `ranks` a string)."""
    for key, about in config.items():
        if key == pg or (desc and about.get("desc") == desc):
            ranks = about.get("ranks")
            try:
                parsed = ast.literal_eval(ranks) if isinstance(ranks, str) else ranks
            except (ValueError, SyntaxError):
                return ()
            return tuple(int(r) for r in parsed or ())
    return ()


def _site(frames: Any) -> str:
    for frame in frames or ():
        filename = str(frame.get("filename", ""))
        if "/torch/" not in filename:
            return f"{filename}:{frame.get('line', '?')}"
    return ""


def records_from_dump(
    dump: Mapping[str, Any], rank: int, members: Mapping[str, Sequence[int]] | None = None
) -> list[CollectiveRecord]:
    """The collective records of one rank's dump (torch's pickle or JSON, as plain containers).

    `members` (group name -> global ranks) fills in what the dump does not say: gloo's
    `pg_config` is empty or keyed by "". Point-to-point entries are left out.
    """
    config = dump.get("pg_config") or {}
    out = []
    for entry in dump.get("entries", ()):
        if entry.get("is_p2p") or entry.get("collective_seq_id") is None:
            continue
        pg, desc = entry.get("process_group") or (str(entry.get("pg_id")), "")
        pg = str(pg)
        ranks = tuple(members[pg]) if members and pg in members else _group_ranks(config, pg, desc)
        out.append(
            CollectiveRecord(
                rank=rank,
                pg=pg,
                seq=int(entry["collective_seq_id"]),
                op=str(entry.get("profiling_name") or "?"),
                input_sizes=_sizes(entry.get("input_sizes")),
                output_sizes=_sizes(entry.get("output_sizes")),
                input_dtypes=tuple(entry.get("input_dtypes") or ()),
                output_dtypes=tuple(entry.get("output_dtypes") or ()),
                ranks=ranks,
                state=str(entry.get("state") or ""),
                site=_site(entry.get("frames")),
                record_id=int(entry.get("record_id", -1)),
            )
        )
    return out


def in_flight(row: Sequence[Any]) -> bool:
    """A sampler's row written while its collective was still pending (the eleventh field:
    what it passed, no times yet; written again once it completes)."""
    return len(row) > 10 and bool(row[10])


def records_from_rows(rank: int, rows: Sequence[Sequence[Any]]) -> list[CollectiveRecord]:
    """The collective records of one line of a rank's collectives file (the sampler's rows:
    `[pg, seq, op, input_sizes, created_ns, started_ns, completed_ns, duration_ms,
    input_dtypes, output_sizes]`, see core/node/collective_sampler.py), for the audit.
    The sampler writes a record once it is final, so each is `completed`, or one pending for
    long as it stands (an eleventh field 1: `started`); the group is its id, as the sampler
    has no name for it. Rows too short or without a number are left out."""
    out = []
    for row in rows:
        if len(row) < 4 or not isinstance(row[0], int) or not isinstance(row[1], int):
            continue
        dtypes = row[8] if len(row) > 8 else None
        outputs = row[9] if len(row) > 9 else None
        try:
            out.append(
                CollectiveRecord(
                    rank=rank,
                    pg=str(row[0]),
                    seq=row[1],
                    op=str(row[2] or "?"),
                    input_sizes=_sizes(row[3]),
                    output_sizes=_sizes(outputs),
                    input_dtypes=tuple(str(d) for d in dtypes or ()),
                    # output dtypes: not in the sampler's rows
                    state="started" if in_flight(row) else "completed",
                )
            )
        except (TypeError, ValueError):
            continue
    return out
