"""Two ranks on one GPU, from a capture on 2 x H100: the default local job (2 pseudo-nodes x 2
processes) with each pseudo-node's local rank 0 on `cuda:0`. NCCL's exception says only
`invalid usage`; its "Last error:" line says which ranks share which GPU. The root cause must
say so, with the fix.

tests/data/gpu/h100x2_first/default_envcheck.jsonl is the headless run's own event stream;
its failure records carry each rank's traceback as torchrun's error file had it, and the
workers printed the same lines on stderr. Both are replayed here through the JobWatch.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddptui.core.diagnose import failures as fx
from ddptui.core.diagnose.failures import ordered_failures
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import FailureRecord
from ddptui.core.monitor import causes
from ddptui.core.monitor import patterns as dx
from ddptui.core.monitor.agent_log import WorkerFailed

CAPTURE = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h100x2_first"
EVENTS = [
    json.loads(line)
    for line in (CAPTURE / "default_envcheck.jsonl").read_text().splitlines()
    if line.strip()
]
FAILURES = [e["failure"] for e in EVENTS if e["event"] == "failure"]


def test_the_last_error_line_is_recognised_with_the_ranks_and_the_fix() -> None:
    lines = [line for f in FAILURES for line in f["traceback"]]
    found = [d for line in lines if (d := dx.recognise(line)) is not None]
    assert {d.kind for d in found} == {dx.DUPLICATE_GPU}
    first = next(d for d in found if "ranks 1 and 3" in d.summary)
    assert "two ranks on one GPU" in first.summary and "PCI 0000:00:07.0" in first.summary
    assert "--nproc-per-node" in first.summary and "CUDA_VISIBLE_DEVICES" in first.summary
    assert all(dx.may_report_failure(d.line) for d in found)
    # the exception line alone (no NCCL_DEBUG) is no duplicate GPU: invalid usage has causes
    assert dx.recognise(FAILURES[0]["traceback"][-4]) is None


def test_nccl_bus_ids_read_as_nvidia_smi_shows_them() -> None:
    # nvidia_smi_q.txt of the same machine: its GPUs are 00000000:00:06.0 and 00000000:00:07.0
    assert dx.pci_of_nccl_bus_id("60") == "0000:00:06.0"
    assert dx.pci_of_nccl_bus_id("70") == "0000:00:07.0"
    assert dx.pci_of_nccl_bus_id("1b000") == "0000:1b:00.0"


def test_cause_of_the_capture_failures_is_duplicate_gpu() -> None:
    for f in FAILURES:
        assert causes.cause_of(f["exit_code"], f["error"]) == causes.SHARED_GPU
    assert not causes.is_victim(causes.SHARED_GPU)


def _replay() -> JobWatch:
    """The workers' stderr lines as torchrun --tee prefixed them, then the agents' summaries."""
    monitor = JobWatch(["local0", "local1"], 2)
    for f in FAILURES:
        prefix = f"[ddptui:{f['rank']}:{f['local_rank']}]:"
        monitor.feed_lines(f["node"], [prefix + line for line in f["traceback"]], now=100.0)
    for f in FAILURES:
        fact = WorkerFailed(
            f["local_rank"],
            f["exit_code"],
            f["rank"],
            root_cause=f["first_on_node"],
            host=f["host"],
            time=f["time"],
            pid=f["pid"],
            error_file=f["error_file"],
            traceback=tuple(f["traceback"]),
            from_summary=True,
        )
        monitor.board.worker_failed(f["node"], fact)
        monitor.failure_reported(f["node"], fact)
    return monitor


def test_root_cause_of_the_replayed_run_says_two_ranks_on_one_gpu() -> None:
    monitor = _replay()
    ordered: list[FailureRecord] = ordered_failures(monitor.board)
    assert ordered[0].root_cause and ordered[0].cause == causes.SHARED_GPU
    assert {r.cause for r in ordered} == {causes.SHARED_GPU}
    told = monitor.summary()
    assert told.culprit is not None and told.culprit.cause == causes.SHARED_GPU
    said = fx.explanation(told.culprit.cause, told.culprit.diagnoses)
    assert said.startswith("two ranks on one GPU: ranks ")
    assert "--nproc-per-node" in said


def test_error_file_alone_explains_it_when_the_worker_lines_were_lost() -> None:
    monitor = JobWatch(["local0", "local1"], 2)
    f = FAILURES[0]
    fact = WorkerFailed(
        f["local_rank"], 1, f["rank"], True, traceback=tuple(f["traceback"]), from_summary=True
    )
    monitor.board.worker_failed(f["node"], fact)
    monitor.failure_reported(f["node"], fact)
    cell = monitor.board.cell(f["node"], f["local_rank"])
    assert cell is not None and dx.DUPLICATE_GPU in [d.kind for d in cell.diagnoses]
    assert cell.cause == causes.SHARED_GPU


PREFLIGHT = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h100x2_preflight"


def test_the_raw_node_logs_of_a_second_h100_run_replay_to_the_same_story() -> None:
    """`--nodes 2 --nproc-per-node 1 --no-gpu-split` on 2 x H100 (bench/gpu/preflight.py):
    each node's whole log, bytes as they came, through the JobWatch (the monitor and its judges)."""
    monitor = JobWatch(["local0", "local1"], 1)
    for index, node in enumerate(("local0", "local1")):
        monitor.feed(node, (PREFLIGHT / f"duplicate_2x1_00{index}-{node}.log").read_bytes(), 1.0)
        monitor.end_of_output(node)
    told = monitor.summary()
    assert told.culprit is not None and told.culprit.cause == causes.SHARED_GPU
    assert {r.cause for r in told.ranks} == {causes.SHARED_GPU}
    said = fx.explanation(told.culprit.cause, told.culprit.diagnoses)
    assert "both on the GPU at PCI 0000:00:06.0" in said
    # and what the console itself said in that run's summary
    events = (PREFLIGHT / "duplicate_2x1.jsonl").read_text().splitlines()
    summary = json.loads(events[-1])
    assert summary["event"] == "summary" and "two ranks on one GPU" in summary["detail"]
