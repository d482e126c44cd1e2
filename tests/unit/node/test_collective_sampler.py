"""The workers' collective sampler on its own: new records only, NCCL's held until done."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest

from ddptui.core.diagnose.collectives import read_samples, sample_from_data
from ddptui.core.monitor.collective_record import records_from_rows
from ddptui.core.node import collective_sampler
from ddptui.core.node.collective_sampler import CollectiveSampler, start_sampler


def _entry(rid: int, seq: int, op: str = "gloo:all_reduce", **more: object) -> dict:
    return {
        "record_id": rid,
        "pg_id": 0,
        "collective_seq_id": seq,
        "profiling_name": op,
        "input_sizes": [[4]],
        "time_created_ns": 1_000 + rid,
        "time_discovered_started_ns": 0,
        "time_discovered_completed_ns": 0,
        "state": "scheduled",
        "is_p2p": False,
        "input_dtypes": ["Float"],
        "output_sizes": [[4]],
        **more,
    }


def test_only_records_not_written_before_are_returned_and_overwritten_ones_counted(
    tmp_path: Path,
) -> None:
    sampler = CollectiveSampler(str(tmp_path / "rank_0.jsonl"), 0, 0)
    rows, lost = sampler.new_rows("fr", {"entries": [_entry(0, 1), _entry(1, 2)]})
    assert [r[1] for r in rows] == [1, 2] and lost == 0
    assert rows[0] == [0, 1, "gloo:all_reduce", [[4]], 1_000, None, None, None, ["Float"], [[4]]]
    rows, lost = sampler.new_rows("fr", {"entries": [_entry(1, 2), _entry(5, 6), _entry(6, 7)]})
    assert [r[1] for r in rows] == [6, 7] and lost == 3
    assert sampler.new_rows("fr", {"entries": [_entry(6, 7)]}) == ([], 0)


def test_an_nccl_record_waits_until_it_completed_and_p2p_is_left_out(tmp_path: Path) -> None:
    sampler = CollectiveSampler(str(tmp_path / "rank_0.jsonl"), 0, 0)
    done = {"state": "completed", "duration_ms": 0.5, "time_discovered_completed_ns": 9}
    entries = [
        _entry(0, 1, "nccl:all_reduce", **done),
        _entry(1, 0, "nccl:send", is_p2p=True, **done),
        _entry(2, 2, "nccl:all_reduce", state="started"),
        _entry(3, 3, "nccl:all_reduce", **done),
    ]
    rows, _ = sampler.new_rows("nccl", {"entries": entries}, now_ns=2_000)
    assert [r[1] for r in rows] == [1] and rows[0][6:8] == [9, 0.5]
    entries[2] = _entry(2, 2, "nccl:all_reduce", **done)
    rows, _ = sampler.new_rows("nccl", {"entries": entries}, now_ns=2_000)
    assert [r[1] for r in rows] == [2, 3]


def test_an_nccl_record_pending_for_long_is_written_once_as_it_stands(tmp_path: Path) -> None:
    """A collective some rank called with another size never completes on NCCL 2.28: what
    it passed must still reach the audit (an in-flight row), and the straggler's scores must
    not take it for a finished one."""
    sampler = CollectiveSampler(str(tmp_path / "rank_1.jsonl"), 1, 1)
    done = {"state": "completed", "duration_ms": 0.5, "time_discovered_completed_ns": 9}
    odd = _entry(1, 2, "nccl:all_reduce", state="started", input_sizes=[[8]])
    entries = [_entry(0, 1, "nccl:all_reduce", **done), odd, _entry(2, 3, "nccl:all_reduce")]
    second = int(collective_sampler.IN_FLIGHT_S * 1e9)
    rows, _ = sampler.new_rows("nccl", {"entries": entries}, now_ns=1_001 + second - 1)
    assert [r[1] for r in rows] == [1]  # not yet long enough
    rows, _ = sampler.new_rows("nccl", {"entries": entries}, now_ns=1_001 + second)
    assert rows == [[0, 2, "nccl:all_reduce", [[8]], 1_001, None, None, None, ["Float"], [[4]], 1]]
    assert sampler.new_rows("nccl", {"entries": entries}, now_ns=10 * second) == ([], 0)
    entries[1] = {**odd, **done}
    rows, _ = sampler.new_rows("nccl", {"entries": entries}, now_ns=10 * second)
    # once done, as every record; the next one, pending as long, is now the one in flight
    assert [(r[1], len(r)) for r in rows] == [(2, 10), (3, 11)]

    line = {"v": 1, "rank": 1, "local_rank": 1, "host": "h", "pid": 1, "wall_ns": 5,
            "period_s": 1.0, "cost_us": 1, "cpu_us": 1, "lost": 0}  # fmt: skip
    flight = [0, 2, "nccl:all_reduce", [[8]], 1_001, None, None, None, ["Float"], [[4]], 1]
    sample = sample_from_data({**line, "rows": [[0, 1, "nccl:all_reduce", [[4]], 1_000, 5, 9,
                                                 0.5, ["Float"], [[4]]], flight]})  # fmt: skip
    assert sample is not None and [c.seq for c in sample.collectives] == [1]
    records = records_from_rows(1, [flight])
    assert [(r.seq, r.input_sizes, r.state) for r in records] == [(2, ((8,),), "started")]


def test_a_sample_reads_the_recorder_of_a_worker_that_has_torch_and_writes_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in torch in sys.modules with the recorder's dump; without it, nothing."""
    path = tmp_path / "rank_3.jsonl"
    sampler = CollectiveSampler(str(path), 3, 1)
    sampler.sample(1.0)
    assert not path.exists()  # no torch in this process's modules: not imported for it
    entries = [_entry(0, 1), _entry(1, 2)]
    c10d = types.SimpleNamespace(
        _dump_fr_trace=lambda **kw: pickle.dumps({"entries": entries, "pg_status": {}})
    )
    fake = types.SimpleNamespace(_C=types.SimpleNamespace(_distributed_c10d=c10d))
    monkeypatch.setitem(sys.modules, "torch", fake)
    sampler.sample(1.0)
    sampler.sample(1.0)  # nothing new: no line
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert (record["rank"], record["local_rank"], record["lost"]) == (3, 1, 0)
    assert record["cost_us"] >= 0 and record["period_s"] == 1.0
    [sample] = read_samples(lines)
    assert [c.seq for c in sample.collectives] == [1, 2] and sample.rank == 3


def test_a_dump_holding_more_than_plain_data_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rank_0.jsonl"
    c10d = types.SimpleNamespace(_dump_fr_trace=lambda **kw: pickle.dumps(Path("/")))
    fake = types.SimpleNamespace(_C=types.SimpleNamespace(_distributed_c10d=c10d))
    monkeypatch.setitem(sys.modules, "torch", fake)
    CollectiveSampler(str(path), 0, 0).sample(1.0)
    assert not path.exists()


def test_period_zero_starts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(collective_sampler.PERIOD_VAR, "0")
    assert start_sampler(str(tmp_path), 0, 0) is None
    assert not (tmp_path / "collectives").exists()


def test_a_rank_that_ends_by_an_exception_writes_its_last_records(tmp_path: Path) -> None:
    """The odd rank of a gloo size mismatch ends by an exception (its peer aborted) well
    within a period; its record of the collective it got wrong is written as the exception
    ends it, before torch's own exit handlers run."""
    program = f"""
import os, pickle, sys, time, types
sys.path.insert(0, {str(Path(collective_sampler.__file__).parent)!r})
import collective_sampler as cs
entries = [{{"record_id": 0, "pg_id": 0, "collective_seq_id": 1, "input_sizes": [[8]],
            "profiling_name": "gloo:all_reduce", "time_created_ns": 1, "state": "started"}}]
c10d = types.SimpleNamespace(_dump_fr_trace=lambda **kw: pickle.dumps({{"entries": entries}}))
sys.modules["torch"] = types.SimpleNamespace(_C=types.SimpleNamespace(_distributed_c10d=c10d))
os.environ[cs.PERIOD_VAR] = "60"  # the thread's first sample would come a minute later
cs.start_sampler({str(tmp_path)!r}, 1, 1)
import atexit  # torch's exit handlers, registered after the hook's, run before it: gone then
atexit.register(sys.modules.pop, "torch")
raise RuntimeError("Connection reset by peer")
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 1 and "Connection reset by peer" in done.stderr
    [sample] = read_samples((tmp_path / "collectives" / "rank_1.jsonl").read_text().splitlines())
    assert [(c.seq, c.sizes) for c in sample.collectives] == [(1, "[[8]]")]
