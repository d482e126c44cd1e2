"""The collective audit, wired into the Monitor: mismatches as events, the odd rank blamed.

Fed with the committed gloo dumps (tests/data/fr_audit/, made by real torchrun) in the shape
the node collector ships them, and with the captured output of the same bug (gloo aborts
rank 0, the rank that *received* the odd size): the verdict must name rank 1.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from ddptui.core.diagnose.audit_watch import MismatchReport, records_of_dumps
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.verdict import Role, VerdictReport
from ddptui.core.events import FailureReport, RankChanged
from ddptui.core.monitor.causes import MISMATCH
from ddptui.core.monitor.collective_record import records_from_dump

DATA = Path(__file__).resolve().parents[2] / "data"
GLOO_SIZE = (DATA / "verdicts" / "collective_mismatch--gloo_size.log").read_bytes()


def _collected(case: str) -> dict[str, Any]:
    """The node collector's report of a case's dumps: each rank's file, trimmed to plain data."""
    dumps = []
    for path in sorted((DATA / "fr_audit" / case).glob("rank_*")):
        dump = pickle.loads(path.read_bytes())
        rank = int(path.name.removeprefix("rank_"))
        entries = [{k: v for k, v in e.items() if k != "frames"} for e in dump["entries"]]
        dumps.append({"file": f"fr_rank_{rank}", "rank": rank, "entries": entries})
    return {"method": "none", "ranks": [], "fr": json.loads(json.dumps(dumps))}


def _gloo_output() -> bytes:
    """The captured run with ddptui's line prefix, as the node's log has it."""
    return GLOO_SIZE.replace(b"[default0]:", b"[ddptui:0:0]:").replace(
        b"[default1]:", b"[ddptui:1:1]:"
    )


@pytest.mark.parametrize(
    ("case", "kind", "culprits"),
    [("size", "size", [1]), ("op", "op", [1]), ("dtype", "dtype", [1])],
)
def test_dumps_at_the_teardown_report_the_mismatch_and_mark_the_odd_rank(
    case: str, kind: str, culprits: list[int]
) -> None:
    m = JobWatch(["n0"], 2)
    m.feed("n0", b"[ddptui:0:0]:step 0\n[ddptui:1:1]:step 0\n", now=10.0)
    events = m.recorder_taken({"n0": _collected(case)}, "teardown", now=20.0)
    found = [e for e in events if isinstance(e, MismatchReport)]
    assert len(found) == 1
    line = found[0].to_dict()
    assert line["event"] == "mismatch" and line["kind"] == kind and line["ts"] == 20.0
    assert line["culprits"] == culprits and line["source"] == "teardown"
    assert set(line["ranks"]) == {"0", "1"} and line["collective"]
    marked = [e for e in events if isinstance(e, RankChanged) and e.suspect]
    assert [e.rank for e in marked] == culprits
    cell = m.board.cell("n0", 1)
    assert cell is not None and cell.cause == MISMATCH
    verdicts = [e for e in events if isinstance(e, VerdictReport)]
    assert verdicts and verdicts[-1].verdict.rank == 1
    assert verdicts[-1].verdict.signature == "collective_mismatch"


def test_the_live_entry_point_takes_records_as_they_come_and_repeats_add_nothing() -> None:
    m = JobWatch(["n0"], 2)
    fr = _collected("size")["fr"]
    records = {d["rank"]: records_from_dump(d, d["rank"]) for d in fr}
    first = m.collectives_seen("n0", records[0][:3] + records[1][:3], now=1.0)
    assert not [e for e in first if isinstance(e, MismatchReport)]
    again = m.collectives_seen("n0", records[0] + records[1], now=2.0)
    again += m.collectives_seen("n0", records[0] + records[1], now=3.0)
    assert [e.mismatch.kind for e in again if isinstance(e, MismatchReport)] == ["size"]
    assert m.collectives_seen("nowhere", records[0], now=4.0) == []


def test_gloo_aborts_rank_0_but_the_verdict_names_rank_1_from_the_dumps() -> None:
    m = JobWatch(["n0"], 2)
    events = m.feed("n0", _gloo_output(), now=30.0)
    events += m.end_of_output("n0")
    told = [e for e in events if isinstance(e, FailureReport)]
    assert told and told[-1].ordered[0].rank == 0  # before the dumps: the victim first
    events = m.dumps_audited({"n0": _collected("size")}, "failure")
    assert [e.mismatch.culprits for e in events if isinstance(e, MismatchReport)] == [(1,)]
    verdict = m.final_verdict(now=40.0)
    assert verdict is not None and verdict.final
    said = verdict.to_dict()
    assert said["rank"] == 1 and said["node"] == "n0" and said["role"] == str(Role.INITIATING)
    assert said["signature"] == "collective_mismatch" and said["domain"] == "job"
    assert said["outlook"] == "fix_first" and "size mismatch" in said["evidence"][0]
    summary = m.summary()
    assert summary.culprit is not None and summary.culprit.rank == 1
    assert summary.failures[0].rank == 1 and summary.failures[0].root_cause
    causes = {r.rank: r.cause for r in summary.ranks}
    assert causes[1] == MISMATCH and causes[0] != MISMATCH


def test_without_the_dumps_the_verdict_says_what_gloo_said() -> None:
    """Rank 1 was stopped by its agent (SIGTERM) and rank 0 aborted: no dump of either came.
    The verdict keeps gloo's words and says the odd rank may be the peer."""
    m = JobWatch(["n0"], 2)
    m.feed("n0", _gloo_output(), now=30.0)
    m.end_of_output("n0")
    verdict = m.final_verdict(now=40.0)
    assert verdict is not None
    said = verdict.to_dict()
    assert said["signature"] == "collective_mismatch"
    assert "Received data size" in said["evidence"][0]
    assert "may be its peer" in said["summary"]


def test_records_of_dumps_prefer_nccls_recorder() -> None:
    entry = {"collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "pg_id": 0}
    dumps = [
        {"file": "fr_rank_0", "rank": 0, "entries": [dict(entry, profiling_name="gloo:x")]},
        {"file": "fr_nccl_rank_0", "rank": 0, "entries": [entry]},
    ]
    assert [r.op for r in records_of_dumps(dumps)] == ["nccl:all_reduce"]


def test_a_rank_dead_before_any_traceback_shows_its_own_last_line() -> None:
    """The script missing: torchrun's summary says only "To enable traceback see: ..."."""
    log = (DATA / "verdicts" / "missing_file--script.log").read_bytes()
    log = log.replace(b"[default0]:", b"[ddptui:0:0]:").replace(b"[default1]:", b"[ddptui:1:1]:")
    m = JobWatch(["n0"], 2)
    m.feed("n0", log, now=5.0)
    m.end_of_output("n0")
    summary = m.summary()
    assert summary.failures
    for record in summary.failures:
        assert "can't open file" in record.error and "To enable traceback" not in record.error
    assert sum(r.root_cause for r in summary.failures) == 1
    verdict = m.final_verdict(now=6.0)
    assert verdict is not None
    said = verdict.to_dict()
    assert said["signature"] == "missing_file" and said["domain"] == "job"
    assert "can't open file" in said["evidence"][0]


def test_the_nccl_size_mismatch_captured_on_two_gpus_is_found_from_the_live_rows() -> None:
    """tests/data/gpu/h200x2_mismatch: trainer/mismatch.py on 2 x H200 (NCCL 2.28.9) through
    the console. Rank 1's all_reduce of step 5 (collective 6) passes 2048 floats, rank 0's
    1024; NCCL hangs there, so rank 1's record never completes and reaches the console only
    as an in-flight row. Replayed line by line as the node's stream carried them."""
    where = DATA / "gpu" / "h200x2_mismatch"
    lines = [
        json.loads(line)
        for name in ("rank_0.jsonl", "rank_1.jsonl")
        for line in (where / name).read_text().splitlines()
    ]
    m = JobWatch(["local0"], 2)
    m.feed("local0", b"[ddptui:0:0]:mismatch rank=0 step=0\n", now=1.0)
    found = []
    for i, line in enumerate(sorted(lines, key=lambda d: d["wall_ns"])):
        found += [
            e for e in m.collectives("local0", line, now=2.0 + i) if isinstance(e, MismatchReport)
        ]
    assert len(found) == 1, found
    said = found[0].to_dict()
    assert (said["kind"], said["seq"], said["culprits"]) == ("size", 6, [1])
    assert said["ranks"] == {"0": "all_reduce [1024] Float", "1": "all_reduce [2048] Float"}
    # what the console said on the machine: the same mismatch, from the live rows
    console = [json.loads(x) for x in (where / "console.jsonl").read_text().splitlines()]
    live = [e for e in console if e["event"] == "mismatch"]
    assert [(e["kind"], e["seq"], e["culprits"], e["source"]) for e in live] == [
        ("size", 6, [1], "live")
    ]


class _NoBoard:
    last_progress = 0.0
    tearing_down = False

    def all_cells(self) -> list[Any]:
        return []

    def move(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []


def _all_reduces(world: int, seq: int, odd: int) -> list[Any]:
    from ddptui.core.monitor.collective_record import CollectiveRecord

    return [
        CollectiveRecord(
            rank,
            "0",
            seq,
            "nccl:all_reduce",
            ((4 if rank == odd and seq > 5 else 8,),),
            input_dtypes=("Float",),
        )  # fmt: skip
        for rank in range(world)
    ]


@pytest.mark.parametrize("world", [2, 3])
def test_a_mismatch_that_repeats_at_every_later_collective_is_said_once(world: int) -> None:
    """The odd rank passes half the size from collective 6 on, as the 2-GPU NCCL run did for
    90 s: on two ranks the audit can name the odd one only at the first (the later ones come
    with no culprit), on three at every one. Either way one cause: one report."""
    from ddptui.core.diagnose.audit_watch import AuditWatch

    watch: AuditWatch[Any] = AuditWatch(_NoBoard(), world)
    said = []
    for seq in range(1, 400):
        said += watch.seen(_all_reduces(world, seq, world - 1), "live", float(seq))
    reports = [e for e in said if isinstance(e, MismatchReport)]
    assert [(r.mismatch.kind, r.mismatch.seq, r.mismatch.culprits) for r in reports] == [
        ("size", 6, (world - 1,))
    ]
    assert len(watch.mismatches) == 394  # the audit keeps every one; only the first is said


def _gloo_2x1() -> tuple[dict[str, bytes], list[tuple[str, dict[str, Any]]]]:
    where = DATA / "verdicts" / "gloo_size_2x1"
    logs = {node: (where / f"{node}.log").read_bytes() for node in ("local0", "local1")}
    rows = [
        (f"local{rank}", json.loads(line))
        for rank in (0, 1)
        for line in (where / f"rank_{rank}.jsonl").read_text().splitlines()
    ]
    return logs, sorted(rows, key=lambda item: item[1]["wall_ns"])


@pytest.mark.parametrize("records_first", [True, False])
def test_two_ranks_the_receiver_dies_before_recording_and_the_odd_rank_is_named(
    records_first: bool,
) -> None:
    """The captured 2x1 gloo run: rank 0 aborts on receiving the odd size before writing its
    record of collective 6; rank 1's own record of it stands alone. Whichever comes to the
    console first (the failure or the records), the audit names rank 1 and so does the
    verdict and the story; rank 0 is never blamed."""
    from ddptui.core.story.story import Story

    logs, rows = _gloo_2x1()
    m = JobWatch(["local0", "local1"], 1)
    events: list[Any] = []

    def lines() -> None:
        for node, data in logs.items():
            events.extend(m.feed(node, data, now=1.0))

    if not records_first:
        lines()
    for i, (node, row) in enumerate(rows):
        events.extend(m.collectives(node, row, now=2.0 + i))
    if records_first:
        lines()
    found = [e for e in events if isinstance(e, MismatchReport)]
    assert [(e.mismatch.kind, e.mismatch.seq, e.mismatch.culprits) for e in found] == [
        ("size", 6, (1,))
    ]
    assert found[0].mismatch.ranks == {0: "died in it", 1: "all_reduce [2048] Float"}
    final = m.final_verdict(now=9.0)
    assert final is not None and final.verdict.rank == 1
    story = Story()
    told = story.retell([*events, final])
    assert story.headline().startswith("collective mismatch: rank 1 on local1 — ")
    incidents = [e for e in told if e.kind == "incident"]
    assert all(0 not in e.incident.blamed for e in incidents)  # type: ignore[attr-defined]
