"""The audit's verdicts on real gloo dumps agree with torch's own flight-recorder analyser.

tests/data/fr_audit/ holds five broken jobs' dumps, made by `make_dumps.py` with torchrun.
gloo's dumps key `pg_config` by "" (with no ranks for a new group) while their entries name
the group "0", "1", ...: torch's analyser fails on them as they are (a KeyError), so it is
given the config NCCL's dumps carry, rebuilt from the groups each rank wrote beside its dump.
"""

from __future__ import annotations

import json
import pickle
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest

from ddptui.core.diagnose.audit import CollectiveAudit, MismatchKind, records_from_dump

DUMPS = Path(__file__).parents[2] / "data" / "fr_audit"
CASES = ("skipped", "size", "op", "dtype", "deadlock")


def _load(case: str) -> tuple[dict[int, dict[str, Any]], dict[str, list[int]]]:
    dumps, members = {}, {}
    for path in sorted((DUMPS / case).glob("rank_*")):
        rank = int(path.name.removeprefix("rank_"))
        dumps[rank] = pickle.loads(path.read_bytes())
        members.update(json.loads((DUMPS / case / f"groups_{rank}.json").read_text()))
    return dumps, members


def _torch_verdicts(case: str) -> set[tuple[str, str, int, frozenset[int]]]:
    """(kind, group, number, ranks) of each collective torch's analyser found wrong."""
    pytest.importorskip("torch")
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.types import MatchState

    dumps, members = _load(case)
    details = {}
    for rank, dump in dumps.items():
        descs = {str(e["process_group"][0]): e["process_group"][1] for e in dump["entries"]}
        config = {
            name: {"name": name, "desc": descs.get(name, "undefined"), "ranks": str(ranks)}
            for name, ranks in members.items()
        }
        details[f"rank_{rank}"] = {**dump, "rank": rank, "pg_config": config}
    args = Namespace(
        verbose=False, just_print_entries=False, allow_incomplete_ranks=False, mismatch_cap=10
    )
    db = build_db(details, args, dumps[0]["version"])
    kinds = {
        MatchState.COLLECTIVE_TYPE_MISMATCH: "op",
        MatchState.SIZE_OR_SYNTAX_MISMATCH: "size",
        MatchState.COLLECTIVE_DTYPE_MISMATCH: "dtype",
    }
    found = set()
    for collective in db.collectives:
        pg, seq = collective.group_id, collective.collective_seq_id
        if collective.missing_ranks:
            found.add(("missing", pg, seq, frozenset(collective.missing_ranks)))
        for rank, odd in (collective.mismatch_collectives or {}).items():
            assert odd.type_of_mismatch is not None
            found.add((kinds[odd.type_of_mismatch.state], pg, seq, frozenset({rank})))
    return found


def _our_verdicts(case: str) -> set[tuple[str, str, int, frozenset[int]]]:
    dumps, members = _load(case)
    audit = CollectiveAudit(world=tuple(sorted(dumps)), members=members)
    found = []
    for rank, dump in sorted(dumps.items()):
        found += audit.feed(records_from_dump(dump, rank, members))
    found += audit.settle()
    out = set()
    for mismatch in found:
        if mismatch.kind in (MismatchKind.SKIPPED, MismatchKind.DEADLOCK):
            absent = frozenset(r for r, what in mismatch.ranks.items() if what.startswith("absent"))
            out.add(("missing", mismatch.pg, mismatch.seq, absent))
        else:
            out.add((str(mismatch.kind), mismatch.pg, mismatch.seq, frozenset(mismatch.culprits)))
    return out


@pytest.mark.parametrize("case", CASES)
def test_the_audit_agrees_with_torchs_analyser(case: str) -> None:
    ours = _our_verdicts(case)
    assert ours, "the audit found nothing wrong"
    assert ours == _torch_verdicts(case)


EXPECTED = {
    "skipped": (MismatchKind.SKIPPED, "0", 6, (2,)),
    "size": (MismatchKind.SIZE, "0", 6, (1,)),
    "op": (MismatchKind.OP, "0", 6, (1,)),
    "dtype": (MismatchKind.DTYPE, "0", 6, (1,)),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_each_case_names_the_rank_that_broke_it(case: str) -> None:
    """The odd rank is the last one (the generator's bug), not the rank gloo aborted (0)."""
    dumps, members = _load(case)
    audit = CollectiveAudit(world=tuple(sorted(dumps)), members=members)
    found = []
    for rank, dump in sorted(dumps.items()):
        found += audit.feed(records_from_dump(dump, rank, members))
    if case == "skipped":
        assert found == []  # live, a rank not there yet is only late
        found = audit.settle()
    [mismatch] = found
    assert (mismatch.kind, mismatch.pg, mismatch.seq, mismatch.culprits) == EXPECTED[case]
    assert mismatch.to_dict()["event"] == "mismatch"


def test_a_two_group_deadlock_blames_no_single_rank() -> None:
    dumps, members = _load("deadlock")
    audit = CollectiveAudit(world=(0, 1), members=members)
    for rank, dump in sorted(dumps.items()):
        assert audit.feed(records_from_dump(dump, rank, members)) == []
    found = audit.settle()
    assert {(m.kind, m.pg, m.culprits) for m in found} == {
        (MismatchKind.DEADLOCK, "1", ()),
        (MismatchKind.DEADLOCK, "2", ()),
    }
    assert found[0].ranks[1] == "absent, waits in all_reduce [4] Float #1 of group 2"
