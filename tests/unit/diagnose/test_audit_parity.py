"""The audit's verdicts on real gloo dumps agree with torch's own flight-recorder analyser.

tests/data/fr_audit/ holds five broken jobs' dumps, made by `make_dumps.py` with torchrun.
gloo's dumps key `pg_config` by "" (with no ranks for a new group) while their entries name
the group "0", "1", ...: torch's analyser fails on them as they are (a KeyError), so it is
given the config NCCL's dumps carry, rebuilt from the groups each rank wrote beside its dump.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest

from ddptui.core.diagnose.audit import CollectiveAudit, MismatchKind
from ddptui.core.monitor.collective_record import records_from_dump

DUMPS = Path(__file__).parents[2] / "data" / "fr_audit"
CASES = ("skipped", "size", "op", "dtype", "deadlock")


def _load(case: str) -> tuple[dict[int, dict[str, Any]], dict[str, list[int]]]:
    dumps, members = {}, {}
    for path in sorted((DUMPS / case).glob("rank_*")):
        rank = int(path.name.removeprefix("rank_"))
        dumps[rank] = pickle.loads(path.read_bytes())
        members.update(json.loads((DUMPS / case / f"groups_{rank}.json").read_text()))
    return dumps, members


def _whole_config(dump: dict[str, Any], members: dict[str, list[int]]) -> dict[str, Any]:
    """The `pg_config` NCCL's dumps carry: each group by name, with its desc and ranks."""
    descs = {str(e["process_group"][0]): e["process_group"][1] for e in dump["entries"]}
    return {
        name: {"name": name, "desc": descs.get(name, "undefined"), "ranks": str(ranks)}
        for name, ranks in members.items()
    }


def _torch_verdicts(case: str) -> set[tuple[str, str, int, frozenset[int]]]:
    """(kind, group, number, ranks) of each collective torch's analyser found wrong (torch is
    in the test extra: CI installs it)."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.types import MatchState

    dumps, members = _load(case)
    details = {
        f"rank_{rank}": {**dump, "rank": rank, "pg_config": _whole_config(dump, members)}
        for rank, dump in dumps.items()
    }
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


COLLECTED = Path(__file__).parents[2] / "data" / "stall"


@pytest.mark.parametrize("capture", ["gloo_skip_collect.json", "gpu_h100x2/collect.json"])
def test_the_hooks_own_reports_give_the_skip(capture: str) -> None:
    """What the node collector ships (the newest entries, trimmed, no group members): rank 1
    skipped the all_reduce the other entered, on gloo and on two H100s (NCCL)."""
    report = json.loads((COLLECTED / capture).read_text())
    audit = CollectiveAudit()
    for dump in report["fr"]:
        assert audit.feed(records_from_dump(dump, dump["rank"])) == []
    [skip] = audit.settle()
    assert (skip.kind, skip.pg, skip.seq, skip.culprits) == (MismatchKind.SKIPPED, "0", 5, (1,))


def _cli(trace_dir: Path, prefix: str) -> str:
    """`python -m torch.distributed.flight_recorder.fr_trace DIR -p PREFIX`, its log."""
    command = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
    done = subprocess.run(
        [*command, str(trace_dir), "-p", prefix],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout + done.stderr


def test_torchs_command_line_on_the_nccl_dumps_of_two_h100s() -> None:
    """The dumps of the H100 skip (NCCL's `pg_config` is whole): torch's own command line."""
    fr = COLLECTED / "gpu_h100x2" / "fr"
    said = _cli(fr, "fr_nccl_rank_")
    assert "Not all ranks joining collective, sequence number: 5" in said
    assert "missing ranks: {1}" in said
    audit = CollectiveAudit()
    for rank in (0, 1):
        dump = pickle.loads((fr / f"fr_nccl_rank_{rank}").read_bytes())
        assert audit.feed(records_from_dump(dump, rank)) == []
    [skip] = audit.settle()
    assert (skip.kind, skip.seq, skip.culprits) == (MismatchKind.SKIPPED, 5, (1,))


CLI_SAYS = {
    "skipped": ["Not all ranks joining collective, sequence number: 6", "missing ranks: {2}"],
    "size": ["Culprit rank 1; Error type: SIZE_OR_SYNTAX_MISMATCH"],
    "op": ["Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH"],
    "dtype": ["Culprit rank 1; Error type: COLLECTIVE_DTYPE_MISMATCH"],
    "deadlock": ["missing ranks: {1}", "missing ranks: {0}"],
}


@pytest.mark.parametrize("case", CASES)
def test_torchs_command_line_on_the_gloo_dumps(case: str, tmp_path: Path) -> None:
    """The same five dumps through `fr_trace` itself, once their `pg_config` is whole."""
    dumps, members = _load(case)
    for rank, dump in dumps.items():
        whole = {**dump, "pg_config": _whole_config(dump, members)}
        (tmp_path / f"rank_{rank}").write_bytes(pickle.dumps(whole))
    said = _cli(tmp_path, "rank_")
    for words in CLI_SAYS[case]:
        assert words in said
