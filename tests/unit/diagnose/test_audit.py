"""The collective audit fed live: late is not wrong, the odd rank is named, the cost stays flat."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ddptui.core.diagnose.audit import CollectiveAudit, MismatchKind
from ddptui.core.monitor.collective_record import CollectiveRecord, records_from_dump

SITE = "train.py:52"


def rec(
    rank: int,
    seq: int,
    size: int = 4,
    op: str = "nccl:all_reduce",
    dtype: str = "Float",
    pg: str = "0",
    site: str = SITE,
    ranks: tuple[int, ...] = (),
) -> CollectiveRecord:
    return CollectiveRecord(
        rank, pg, seq, op, ((size,),), ((size,),), (dtype,), (dtype,), ranks, site=site,
        record_id=seq,
    )  # fmt: skip


def steps(audit: CollectiveAudit, ranks: range, upto: int, start: int = 1) -> None:
    for seq in range(start, upto + 1):
        assert audit.feed(rec(r, seq) for r in ranks) == []


def test_matching_collectives_leave_nothing_open() -> None:
    audit = CollectiveAudit(world=(0, 1, 2, 3))
    steps(audit, range(4), 500)
    assert audit.pending() == []
    assert audit.mismatches == []


def test_a_late_rank_is_no_mismatch_until_settled() -> None:
    audit = CollectiveAudit(world=(0, 1))
    steps(audit, range(2), 3)
    assert audit.feed([rec(0, 4)]) == []
    assert audit.pending() == [("0", 4, frozenset({1}))]
    assert audit.feed([rec(1, 4)]) == []  # it came: late, not wrong
    assert audit.feed([rec(0, 5)]) == []
    [skip] = audit.settle()
    assert (skip.kind, skip.seq, skip.culprits) == (MismatchKind.SKIPPED, 5, (1,))
    assert skip.ranks == {0: "all_reduce [4] Float", 1: "absent"}
    assert audit.settle() == []  # said once


def test_a_size_change_on_one_of_two_ranks_blames_the_rank_that_changed() -> None:
    """Rank 0 is the one gloo aborts; rank 1 changed the size it passes at that call site."""
    audit = CollectiveAudit(world=(0, 1))
    steps(audit, range(2), 4)
    assert audit.feed([rec(0, 5)]) == []
    [mismatch] = audit.feed([rec(1, 5, size=8)])
    assert (mismatch.kind, mismatch.culprits, mismatch.collective) == (
        MismatchKind.SIZE,
        (1,),
        "all_reduce",
    )
    assert mismatch.to_dict() == {
        "event": "mismatch",
        "collective": "all_reduce",
        "kind": "size",
        "ranks": {"0": "all_reduce [4] Float", "1": "all_reduce [8] Float"},
        "pg": "0",
        "seq": 5,
        "culprits": [1],
        "detail": "rank 1 passed all_reduce [8] Float at train.py:52, the others all_reduce "
        "[4] Float",
    }


def test_a_tie_with_no_history_names_no_culprit() -> None:
    audit = CollectiveAudit(world=(0, 1))
    [mismatch] = audit.feed([rec(0, 1), rec(1, 1, size=8)])
    assert mismatch.kind == MismatchKind.SIZE and mismatch.culprits == ()
    assert "no rank stands out" in mismatch.detail


def test_the_minority_is_the_culprit_once_the_others_cannot_outvote_it() -> None:
    audit = CollectiveAudit(world=(0, 1, 2, 3))
    assert audit.feed([rec(0, 1), rec(2, 1, dtype="Double")]) == []  # 1 vs 1, two to come
    assert audit.feed([rec(1, 1)]) == []  # 2 vs 1, one to come: it may side with rank 2
    [mismatch] = audit.feed([rec(3, 1)])
    assert mismatch.culprits == (2,) and mismatch.kind == MismatchKind.DTYPE


def test_history_names_the_culprit_before_the_last_rank_comes() -> None:
    audit = CollectiveAudit(world=(0, 1, 2, 3))
    steps(audit, range(4), 2)
    [mismatch] = audit.feed([rec(0, 3), rec(2, 3, dtype="Double")])
    assert mismatch.culprits == (2,) and mismatch.kind == MismatchKind.DTYPE
    assert audit.feed([rec(1, 3), rec(3, 3)]) == []  # reported once


def test_a_clear_majority_is_reported_before_the_last_rank() -> None:
    audit = CollectiveAudit(world=(0, 1, 2, 3, 4))
    [mismatch] = audit.feed([rec(0, 1), rec(1, 1), rec(2, 1), rec(3, 1, size=2)])
    assert mismatch.culprits == (3,)


def test_a_skip_shows_as_the_next_collective_on_the_skipped_number() -> None:
    """Rank 2 skips the all_reduce: its broadcast lands on number 3, the others' broadcast
    (issued async) on 4."""
    audit = CollectiveAudit(world=(0, 1, 2))
    steps(audit, range(3), 2)
    bcast = "nccl:broadcast"
    assert audit.feed([rec(0, 3), rec(1, 3), rec(0, 4, op=bcast), rec(1, 4, op=bcast)]) == []
    [mismatch] = audit.feed([rec(2, 3, op=bcast)])
    assert (mismatch.kind, mismatch.seq, mismatch.culprits) == (MismatchKind.SKIPPED, 3, (2,))


def test_an_op_mismatch() -> None:
    audit = CollectiveAudit(world=(0, 1, 2))
    [mismatch] = audit.feed([rec(0, 1), rec(1, 1), rec(2, 1, op="gloo:broadcast")])
    assert mismatch.kind == MismatchKind.OP and mismatch.culprits == (2,)


def test_ranks_that_disagree_on_who_takes_part() -> None:
    audit = CollectiveAudit(members={"7": (0, 1, 2)})
    records = [rec(0, 1, pg="7", ranks=(0, 1, 2)), rec(1, 1, pg="7", ranks=(0, 1, 2))]
    [mismatch] = audit.feed([*records, rec(2, 1, pg="7", ranks=(0, 2))])
    assert mismatch.kind == MismatchKind.RANKS and mismatch.culprits == (2,)


def _live(record: CollectiveRecord) -> CollectiveRecord:
    """The record as the live channel's row gives it: no output dtypes, no group ranks."""
    return replace(record, output_dtypes=(), ranks=())


def test_records_from_the_live_rows_and_from_a_dump_agree_on_what_both_know() -> None:
    """Ranks 0-2 came as live rows, rank 3 from its dump at the failure (output dtypes and
    the group's ranks known): no mismatch; a size that differs is still one."""
    audit = CollectiveAudit(world=(0, 1, 2, 3))
    group = (0, 1, 2, 3)
    for seq in range(1, 6):
        assert audit.feed([*(_live(rec(r, seq)) for r in range(3)), rec(3, seq, ranks=group)]) == []
    assert audit.pending() == [] and audit.mismatches == []
    [mismatch] = audit.feed([_live(rec(0, 6)), _live(rec(1, 6, size=8)), _live(rec(2, 6))])
    assert (mismatch.kind, mismatch.culprits) == (MismatchKind.SIZE, (1,))
    assert audit.feed([rec(3, 6, ranks=group)]) == []


def test_repeated_records_cost_nothing_and_say_nothing() -> None:
    """The hook ships each rank's newest entries every read: the overlap is dropped."""
    audit = CollectiveAudit(world=(0, 1))
    window = [rec(0, s) for s in range(1, 65)]
    assert audit.feed(window) == []
    assert audit.feed(window) == []
    assert len(audit.pending()) == 64
    steps(audit, range(1, 2), 64)
    assert audit.pending() == []


def test_groups_are_matched_apart() -> None:
    audit = CollectiveAudit(members={"0": (0, 1, 2, 3), "1": (0, 1), "2": (2, 3)})
    feed = [rec(r, 1, pg="1") for r in (0, 1)] + [rec(r, 1, pg="2", size=16) for r in (2, 3)]
    assert audit.feed(feed) == []
    assert audit.pending() == []


def test_records_from_an_nccl_dump() -> None:
    entry = {
        "record_id": 3,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": 4,
        "p2p_seq_id": 0,
        "profiling_name": "nccl:all_reduce",
        "input_sizes": [[1024, 2]],
        "output_sizes": [[1024, 2]],
        "input_dtypes": ["BFloat16"],
        "output_dtypes": ["BFloat16"],
        "state": "completed",
        "is_p2p": False,
        "frames": [
            {"name": "all_reduce", "filename": "/x/torch/distributed/distributed_c10d.py"},
            {"name": "step", "filename": "/home/u/train.py", "line": 52},
        ],
    }
    p2p = {**entry, "is_p2p": True, "profiling_name": "nccl:send 0->1"}
    dump = {"pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}}
    [record] = records_from_dump({**dump, "entries": [entry, p2p]}, rank=1)
    assert record == CollectiveRecord(
        1, "0", 4, "nccl:all_reduce", ((1024, 2),), ((1024, 2),), ("BFloat16",),
        ("BFloat16",), (0, 1), "completed", "/home/u/train.py:52", 3,
    )  # fmt: skip
    assert record.describe() == "all_reduce [1024x2] BFloat16"


@pytest.mark.parametrize("kind", list(MismatchKind))
def test_every_kind_reads_as_its_value(kind: MismatchKind) -> None:
    assert str(kind) == kind.value


def test_a_feed_that_starts_mid_run_or_loses_records_is_no_skip() -> None:
    """Each read ships a rank's newest entries: one rank's window may start later than
    another's, or leave out what was recorded between two reads."""
    audit = CollectiveAudit(world=(0, 1))
    assert audit.feed(rec(1, s) for s in range(90, 111)) == []
    assert audit.feed(rec(0, s) for s in range(100, 111)) == []
    assert audit.pending() == []
    assert audit.feed(rec(0, s) for s in range(111, 200)) == []
    assert audit.feed([rec(1, 199)]) == []  # rank 1's records 111..198 were never shipped
    assert audit.pending() == []
    assert audit.settle() == []


def test_records_lost_around_a_mismatch_still_let_it_be_judged() -> None:
    audit = CollectiveAudit(world=(0, 1, 2))
    assert audit.feed([rec(0, 4), rec(1, 4, size=2)]) == []  # 1 vs 1, rank 2 may decide
    [mismatch] = audit.feed([rec(2, 4), rec(2, 5)])
    assert mismatch.culprits == (1,)
    audit2 = CollectiveAudit(world=(0, 1, 2))
    assert audit2.feed([rec(0, 4), rec(1, 4, size=2)]) == []
    [mismatch] = audit2.feed([rec(2, 9)])  # rank 2 went past 4 with no record shipped
    assert mismatch.kind == MismatchKind.SIZE and mismatch.culprits == ()


def test_with_no_membership_a_late_rank_is_checked_against_closed_collectives() -> None:
    """gloo's dumps name no group members: the ranks seen so far stand for them."""
    audit = CollectiveAudit()
    assert audit.feed(rec(0, s) for s in range(1, 4)) == []
    assert audit.pending() == []  # rank 0 alone: nothing to compare yet
    found = audit.feed([rec(1, 1), rec(1, 2), rec(1, 3, size=8)])
    assert [(m.kind, m.seq, m.culprits) for m in found] == [(MismatchKind.SIZE, 3, (1,))]


def test_what_the_audit_keeps_stays_bounded_over_a_long_run() -> None:
    """Fed live for hours, it keeps the open collectives and a window of closed ones only."""
    audit = CollectiveAudit(world=(0, 1, 2, 3))
    for seq in range(1, 5_001):
        audit.feed(rec(r, seq, site=f"train.py:{seq % 3}") for r in range(4))
    assert audit.pending() == [] and audit.mismatches == []
    assert len(audit._open) == 0
    assert len(audit._closed) <= 4096
    assert len(audit._history) == 4 * 3  # rank x call site


def test_records_from_a_json_dump() -> None:
    """`_dump_fr_trace_json` (gloo, torch 2.13): the same fields, lists for tuples."""
    entry = {
        "collective_seq_id": 1, "input_dtypes": ["Half"], "input_sizes": [[3]], "is_p2p": False,
        "op_id": 1, "output_dtypes": ["Half"], "output_sizes": [[3]], "p2p_seq_id": 0,
        "pg_id": 0, "process_group": ["0", "default_pg"], "profiling_name": "gloo:all_reduce",
        "record_id": 0, "retired": True, "state": "scheduled", "thread_id": "1",
        "thread_name": "python3", "time_created_ns": 1795767695282796002,
        "time_discovered_completed_ns": 0, "time_discovered_started_ns": 0,
        "timeout_ms": 1800000,
    }  # fmt: skip
    dump = {"entries": [entry], "pg_config": {"": {"desc": "", "name": "", "ranks": "[0]"}}}
    [record] = records_from_dump(dump, rank=0)
    assert (record.pg, record.seq, record.collective, record.ranks) == ("0", 1, "all_reduce", ())
    assert record.describe() == "all_reduce [3] Half"


def test_a_skip_is_recognised_when_the_others_next_collective_is_already_closed() -> None:
    audit = CollectiveAudit()  # no membership: ranks 0 and 1 close collectives on their own
    bcast = "gloo:broadcast"
    assert audit.feed([rec(0, 1), rec(1, 1), rec(0, 2, op=bcast), rec(1, 2, op=bcast)]) == []
    [mismatch] = audit.feed([rec(2, 1, op=bcast)])
    assert (mismatch.kind, mismatch.seq, mismatch.culprits) == (MismatchKind.SKIPPED, 1, (2,))


def test_an_odd_size_read_before_an_earlier_collective_closed_is_still_named() -> None:
    """The gloo mismatch as a loaded machine delivered it (2 nodes x 2 ranks; rank 0 died in
    collective 6 without a record of it): rank 1's odd collective 6 and ranks 2 and 3's
    usual one came before rank 0's records of 1-5, its node's files read in the order the
    directory listed them. Collective 5 closes only then; collective 6 is judged again."""
    audit = CollectiveAudit(world=(0, 1, 2, 3))
    found = audit.feed([rec(r, s) for r in (1, 2, 3) for s in range(1, 6)])
    found += audit.feed([rec(1, 6, size=8), rec(2, 6), rec(3, 6)])
    assert found == []  # without rank 0's history at that site, no one stands out yet
    [odd] = audit.feed([rec(0, s) for s in range(1, 6)])
    assert (odd.kind, odd.seq, odd.culprits) == (MismatchKind.SIZE, 6, (1,))
    # every order of the same records names the same rank, once
    for first in ((0, 1), (1, 0)):
        again = CollectiveAudit(world=(0, 1, 2, 3))
        batches = {
            0: [rec(0, s) for s in range(1, 6)],
            1: [rec(r, s) for r in (1, 2, 3) for s in range(1, 6)]
            + [rec(1, 6, size=8), rec(2, 6), rec(3, 6)],
        }
        said = [m for b in first for m in again.feed(batches[b])]
        assert [(m.seq, m.culprits) for m in said] == [(6, (1,))]
