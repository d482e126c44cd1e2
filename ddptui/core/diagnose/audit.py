"""Provides the collective audit: ranks that disagree on a collective, found as records arrive.

Every rank numbers the collectives of each process group (`collective_seq_id`); the same
number on two ranks of a group is one collective, so its op, sizes, dtypes and participants
must agree. The audit keeps one open slot per (group, number) until every member has
recorded it, and judges a slot each time a record lands in it: the cost is the new records',
whatever the run's length. A slot whose records disagree is reported at once, with its odd
rank (the culprit): the minority, or on a tie the rank that changed what it passes at that
call site since its own previous records (gloo aborts the rank that *receives* a wrong size,
so the abort alone would blame the victim).

A rank that has not recorded a collective yet is late, not wrong: a rank that skipped one
shows up live as its next collective landing on the skipped number (kind `skipped` when it
is the collective the others issue next, else `op` or `size`). One that never comes is
judged by `settle`, when the stall judge says the job stands still or the run has ended:
kind `skipped`, or `deadlock` when every missing rank waits in a collective of another group.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ddptui.core.monitor.collective_record import CollectiveRecord, known_fields

CLOSED_KEPT = 4096  # closed collectives remembered for a rank that comes after the others


class MismatchKind(enum.StrEnum):
    """What the ranks disagree on (torch's analyser: type, size, dtype, not all joining)."""

    OP = "op"
    SIZE = "size"
    DTYPE = "dtype"
    RANKS = "ranks"
    SKIPPED = "skipped"
    DEADLOCK = "deadlock"


@dataclass(frozen=True)
class CollectiveMismatch:
    """Collective `seq` of group `pg`, on which the ranks disagree; `culprits` are the odd ones
    (empty when the records cannot say which side is wrong)."""

    collective: str
    kind: MismatchKind
    ranks: Mapping[int, str]  # rank -> what it had ("all_reduce [8] Float", "absent"); a dict,
    # so the mismatch pickles across the session's pipe
    pg: str
    seq: int
    culprits: tuple[int, ...] = ()
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The headless line: `{"event": "mismatch", "collective": ..., "kind": "size", ...}`."""
        return {
            "event": "mismatch",
            "collective": self.collective,
            "kind": str(self.kind),
            "ranks": {str(rank): what for rank, what in sorted(self.ranks.items())},
            "pg": self.pg,
            "seq": self.seq,
            "culprits": list(self.culprits),
            "detail": self.detail,
        }

    def describe(self) -> str:
        """`rank 1: size mismatch in all_reduce #6 of group 0`, `rank 2 skipped ...`."""
        where = f"{self.collective} #{self.seq} of group {self.pg}"
        odd = ", ".join(map(str, self.culprits))
        who = f"rank{'s' if len(self.culprits) > 1 else ''} {odd}" if odd else ""
        if self.kind == MismatchKind.DEADLOCK:
            return f"deadlock: groups wait on each other at {where}"
        if self.kind == MismatchKind.SKIPPED:
            return f"{who or 'a rank'} skipped {where}"
        return f"{who + ': ' if who else ''}{self.kind} mismatch in {where}"


def _kind(odd: CollectiveRecord, usual: CollectiveRecord, fields: Sequence[str]) -> MismatchKind:
    """Torch's order: the op first, then sizes, dtypes, and the group's ranks (of the
    optional fields, those both records know)."""
    if odd.collective != usual.collective:
        return MismatchKind.OP
    if odd.input_sizes != usual.input_sizes or (
        "output_sizes" in fields and odd.output_sizes != usual.output_sizes
    ):
        return MismatchKind.SIZE
    if odd.input_dtypes != usual.input_dtypes or (
        "output_dtypes" in fields and odd.output_dtypes != usual.output_dtypes
    ):
        return MismatchKind.DTYPE
    return MismatchKind.RANKS


def _same(one: CollectiveRecord, other: CollectiveRecord) -> bool:
    """Whether two records agree on what both know."""
    fields = known_fields((one, other))
    return one.signature_of(fields) == other.signature_of(fields)


@dataclass
class CollectiveAudit:
    """Matches the ranks' collective records by (group, number) as they arrive.

    `world` is every rank of the job, `members` each group's ranks where known (else a
    record's own `ranks`; a group with neither is taken as the world when `world` is given,
    else as the ranks that have recorded in it).
    """

    world: tuple[int, ...] = ()
    members: Mapping[str, Sequence[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._open: dict[tuple[str, int], dict[int, CollectiveRecord]] = {}
        # each recently closed collective, one record and the ranks that agreed with it: a rank
        # of a group whose members are not known may come after the others closed it
        self._closed: OrderedDict[tuple[str, int], tuple[CollectiveRecord, frozenset[int]]] = (
            OrderedDict()
        )
        self._group_ranks: dict[str, tuple[int, ...]] = {}  # pg -> ranks its records name
        self._reported: set[tuple[str, int]] = set()
        self._newest: dict[tuple[str, int], int] = {}  # (pg, rank) -> its highest number
        self._seen: dict[str, set[int]] = {}  # pg -> the ranks that have recorded in it
        self._last: dict[int, CollectiveRecord] = {}  # rank -> the record it entered last
        self._history: dict[tuple[int, str, str], CollectiveRecord] = {}
        self._active: set[tuple[int, str]] = set()  # (rank, pg) with a judged record
        self.mismatches: list[CollectiveMismatch] = []

    def expected(self, pg: str, records: Iterable[CollectiveRecord] = ()) -> frozenset[int]:
        """The ranks that must record each collective of `pg`: its members where known, else
        the world, else every rank that has recorded in it so far."""
        if pg in self.members:
            return frozenset(self.members[pg])
        for record in records:
            if record.ranks:
                return frozenset(record.ranks)
        if pg in self._group_ranks:
            return frozenset(self._group_ranks[pg])
        return frozenset(self.world) or frozenset(self._seen.get(pg, ()))

    def feed(self, records: Iterable[CollectiveRecord]) -> list[CollectiveMismatch]:
        """Take new records (a rank's repeats are ignored); the mismatches they reveal."""
        found = []
        for record in records:
            key = (record.pg, record.seq)
            before = self._newest.get((record.pg, record.rank), -1)
            if record.seq <= before:
                continue
            self._newest[(record.pg, record.rank)] = record.seq
            if record.seq > before + 1:  # it passed numbers whose records never came to us
                found += self._passed(record.pg, before, record.seq)
            self._seen.setdefault(record.pg, set()).add(record.rank)
            self._last[record.rank] = record  # a rank's records come in the order it made them
            if record.ranks:
                self._group_ranks[record.pg] = record.ranks
            if key in self._reported:
                continue
            slot = self._open.setdefault(key, self._reopen(key))
            slot[record.rank] = record
            mismatch = self._judge(key, slot)
            if mismatch is not None:
                found.append(mismatch)
            elif key in self._closed:
                found += self._after_closing(key)
        self.mismatches.extend(found)
        return found

    def _after_closing(self, key: tuple[str, int]) -> list[CollectiveMismatch]:
        """A collective of the group closed (every rank agreed): what each rank passed there is
        now its history, and the later collectives left undecided for want of it (an odd rank
        told from the others by what it changed) are judged again. The records come in any
        order across ranks (a node's files are read in the order the directory lists them):
        an odd record judged before an earlier collective closed is not left unsaid."""
        found = []
        for later in sorted(k for k in self._open if k[0] == key[0] and k[1] > key[1]):
            if later in self._open:
                mismatch = self._judge(later, self._open[later])
                if mismatch is not None:
                    found.append(mismatch)
        return found

    def _reopen(self, key: tuple[str, int]) -> dict[int, CollectiveRecord]:
        """A closed collective's records back (each agreeing rank's, as one record said)."""
        if key not in self._closed:
            return {}
        record, ranks = self._closed.pop(key)
        return {rank: replace(record, rank=rank) for rank in sorted(ranks)}

    def _passed(self, pg: str, after: int, before: int) -> list[CollectiveMismatch]:
        """Judge again the open collectives a rank went past without a record of its own (a
        ring buffer that wrapped, a feed that started late): it is not missing from them."""
        found = []
        for key in [k for k in self._open if k[0] == pg and after < k[1] < before]:
            mismatch = self._judge(key, self._open[key])
            if mismatch is not None:
                found.append(mismatch)
        return found

    def _missing(self, pg: str, seq: int, slot: Mapping[int, CollectiveRecord]) -> set[int]:
        """The members with no record of collective `seq` that have not gone past it."""
        return {
            rank
            for rank in self.expected(pg, slot.values()) - slot.keys()
            if self._newest.get((pg, rank), -1) < seq
        }

    def _judge(
        self, key: tuple[str, int], slot: dict[int, CollectiveRecord]
    ) -> CollectiveMismatch | None:
        expected = self.expected(key[0], slot.values())
        unknown = len(self._missing(key[0], key[1], slot))
        complete = bool(expected) and unknown == 0
        fields = known_fields(slot.values())  # a live row and a dump's entry agree on these
        sides: dict[tuple[object, ...], list[int]] = {}
        for rank, record in sorted(slot.items()):
            sides.setdefault(record.signature_of(fields), []).append(rank)
        if len(sides) == 1:
            if complete:
                for record in slot.values():
                    self._remember(record)
                del self._open[key]
                self._closed[key] = (next(iter(slot.values())), frozenset(slot))
                if len(self._closed) > CLOSED_KEPT:
                    self._closed.popitem(last=False)
            return None
        sizes = sorted((len(ranks) for ranks in sides.values()), reverse=True)
        majority = [ranks for ranks in sides.values() if len(ranks) == sizes[0]]
        unbeaten = len(majority) == 1 and (not expected or sizes[0] > sizes[1] + unknown)
        culprits = self._odd(slot, fields, majority[0] if unbeaten else [])
        if not (complete or unbeaten or culprits):
            return None  # the ranks still to come may side with either
        usual_rank = next((r for r in sorted(slot) if r not in culprits), min(slot))
        usual = slot[usual_rank]
        odd = slot[culprits[0]] if culprits else next(r for r in slot.values() if r != usual)
        kind = _kind(odd, usual, fields)
        after = (key[0], key[1] + 1)
        closed = self._closed.get(after)
        nxt = [*self._open.get(after, {}).values(), *([closed[0]] if closed else [])]
        if kind != MismatchKind.RANKS and any(
            _same(other, odd) for other in nxt if other.rank != odd.rank
        ):
            kind = MismatchKind.SKIPPED  # its next collective is the others' next: it skipped
        for record in slot.values():
            self._remember(record)
        self._reported.add(key)
        del self._open[key]
        return CollectiveMismatch(
            usual.collective,
            kind,
            {r: rec.describe() for r, rec in sorted(slot.items())},
            key[0],
            key[1],
            tuple(culprits),
            self._detail(kind, usual, odd, culprits),
        )

    def _odd(
        self,
        slot: Mapping[int, CollectiveRecord],
        fields: Sequence[str],
        majority: list[int],
    ) -> list[int]:
        """The minority; on a tie, the ranks that changed what they pass at this call site (or
        called from a new one) while the others passed what they always did."""
        if majority:
            return sorted(r for r in slot if r not in majority)
        changed, steady = [], []
        for rank, record in slot.items():
            before = self._history.get((rank, record.pg, record.site or record.op))
            if before is not None and _same(before, record):
                steady.append(rank)
            elif before is not None or (rank, record.pg) in self._active:
                changed.append(rank)  # a new call site, or a new size at an old one
        if changed and steady:
            changed_sides = {slot[r].signature_of(fields) for r in changed}
            steady_sides = {slot[r].signature_of(fields) for r in steady}
            if not changed_sides & steady_sides:
                return sorted(changed)
        return []

    def _remember(self, record: CollectiveRecord) -> None:
        self._active.add((record.rank, record.pg))
        self._history[(record.rank, record.pg, record.site or record.op)] = record

    @staticmethod
    def _detail(
        kind: MismatchKind, usual: CollectiveRecord, odd: CollectiveRecord, culprits: list[int]
    ) -> str:
        where = f" at {odd.site}" if odd.site else ""
        if not culprits:
            return f"{usual.describe()} vs {odd.describe()}: no rank stands out"
        if kind == MismatchKind.SKIPPED:
            return f"rank {odd.rank} issued its next collective ({odd.describe()}){where}"
        return f"rank {odd.rank} passed {odd.describe()}{where}, the others {usual.describe()}"

    def died_in(self, dead: Iterable[int]) -> list[CollectiveMismatch]:
        """Collectives that ranks which died of a peer's odd collective never recorded: gloo
        aborts the rank that *received* the odd size, before it writes anything more, so on
        two ranks the odd one's record stands alone. Where every living rank in such a
        collective passed, at that call site, what none of them passed before (while each
        dead rank's last record there is the usual one), the living ranks changed: they are
        the odd ones."""
        dead = set(dead)
        found = []
        for key, slot in sorted(self._open.items()):
            missing = self._missing(key[0], key[1], slot)
            if key in self._reported or not slot or not missing or not missing <= dead:
                continue
            before = {
                rank: self._history.get((rank, record.pg, record.site or record.op))
                for rank, record in slot.items()
            }
            usual = next(iter(before.values()))
            fields = known_fields(slot.values())
            if any(b is None or _same(b, slot[r]) for r, b in before.items()) or usual is None:
                continue  # a living rank passed what it always did: nothing changed
            if any(not _same(b, usual) for b in before.values() if b is not None):
                continue  # the living ranks did not agree before either
            if any(
                (h := self._history.get((r, key[0], usual.site or usual.op))) is not None
                and not _same(h, usual)
                for r in missing
            ):
                continue  # the dead ranks passed something else too
            culprits = sorted(slot)
            odd = slot[culprits[0]]
            kind = _kind(odd, replace(usual, rank=-1), fields)
            ranks = {r: rec.describe() for r, rec in slot.items()}
            ranks.update({r: "died in it" for r in missing})
            self._reported.add(key)
            del self._open[key]
            said = ", ".join(map(str, sorted(missing)))
            found.append(
                CollectiveMismatch(
                    odd.collective,
                    kind,
                    dict(sorted(ranks.items())),
                    key[0],
                    key[1],
                    tuple(culprits),
                    f"rank {odd.rank} passed {odd.describe()}, where every rank passed "
                    f"{usual.describe()} before; rank {said} died in it",
                )
            )
        self.mismatches.extend(found)
        return found

    def pending(self) -> list[tuple[str, int, frozenset[int]]]:
        """Open collectives: (group, number, ranks not in it yet), lowest number first."""
        out = []
        for (pg, seq), slot in sorted(self._open.items()):
            missing = self._missing(pg, seq, slot)
            if missing:
                out.append((pg, seq, frozenset(missing)))
        return out

    def settle(self) -> list[CollectiveMismatch]:
        """The job stands still (or has ended): in each group, the first collective some
        member never entered while others did, as a skip or, when all its missing ranks wait
        in another group, a deadlock."""
        found = []
        for pg in sorted(self._seen):
            newest = {r: self._newest.get((pg, r), -1) for r in self.expected(pg)}
            if not newest or max(newest.values()) < 0:
                continue
            top = max(newest.values())
            lowest = min(newest.values())
            if lowest == top:
                continue
            # the first collective after the laggard's newest that we know of (numbers start
            # at 1, or wherever the records we were shipped start)
            known = [k[1] for k in (*self._open, *self._closed) if k[0] == pg and k[1] > lowest]
            seq = min(known, default=lowest + 1)
            if (pg, seq) in self._reported:
                continue
            missing = {r for r, s in newest.items() if s < seq}
            slot = self._open.get((pg, seq)) or self._reopen((pg, seq))
            self._reported.add((pg, seq))
            found.append(self._absent(pg, seq, slot, missing))
        self.mismatches.extend(found)
        return found

    def _absent(
        self, pg: str, seq: int, slot: Mapping[int, CollectiveRecord], missing: set[int]
    ) -> CollectiveMismatch:
        elsewhere = {
            rank: self._last[rank]
            for rank in missing
            if rank in self._last and self._last[rank].pg != pg
        }
        deadlock = len(elsewhere) == len(missing)
        ranks = {r: rec.describe() for r, rec in slot.items()}
        for rank in missing:
            waits = elsewhere.get(rank)
            ranks[rank] = (
                f"absent, waits in {waits.describe()} #{waits.seq} of group {waits.pg}"
                if waits
                else "absent"
            )
        names = ", ".join(map(str, sorted(missing)))
        who = f"rank {names}" if len(missing) == 1 else f"ranks {names}"
        return CollectiveMismatch(
            slot[min(slot)].collective if slot else "?",
            MismatchKind.DEADLOCK if deadlock else MismatchKind.SKIPPED,
            dict(sorted(ranks.items())),
            pg,
            seq,
            () if deadlock else tuple(sorted(missing)),
            f"{who} {'wait' if len(missing) > 1 else 'waits'} in another group"
            if deadlock
            else f"{who} never entered it",
        )
