"""Failure recognition against real torchrun output captured on this machine (and a GPU host).

tests/data/torchrun/README.md says how each file was made.
"""

from __future__ import annotations

import json
import re

import pytest

from ddptui.core.diagnose import failures
from ddptui.core.diagnose.failures import ordered_failures, rank_summaries
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.rank_checks import check_hangs, slow_by_step_rate
from ddptui.core.events import Diagnosis, FailureReport, RankChanged, RankState
from ddptui.core.job.spec import DEFAULT_PROGRESS_PATTERN, SpecError, make_spec
from ddptui.core.monitor import causes
from ddptui.core.monitor import patterns as dx
from ddptui.core.monitor.agent_log import AgentLogParser, AgentTrouble, WorkerFailed
from ddptui.core.runs.summary import RunSummary
from tests.cases import TORCHRUN_CAPTURES as DATA


def replay(*logs: str, nproc: int = 2) -> tuple[JobWatch, list[object]]:
    nodes = [f"n{i}" for i in range(len(logs))]
    monitor = JobWatch(nodes, nproc)
    events: list[object] = []
    for node, name in zip(nodes, logs, strict=True):
        events += monitor.feed(node, (DATA / name).read_bytes(), now=100.0)
        events += monitor.end_of_output(node)
    return monitor, events


def kinds(monitor: JobWatch, node: str, local_rank: int) -> list[str]:
    cell = monitor.board.cell(node, local_rank)
    assert cell is not None
    return [d.kind for d in cell.diagnoses]


# -- single lines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind", "says"),
    [
        ("gpu_nccl_timeout.log", dx.COLLECTIVE_TIMEOUT, "ALLREDUCE (SeqNum 2) past its 10 s"),
        ("gloo_timeout_node0.log", dx.COLLECTIVE_TIMEOUT, "recv waited 5 s for a peer"),
        ("gpu_cuda_oom.log", dx.CUDA_OOM, "tried to allocate 4096.00 GiB"),
        ("rdzv_refused.log", dx.RENDEZVOUS_CONNECT, "rendezvous store at 127.0.0.1:41281"),
        ("rdzv_timeout.log", dx.RENDEZVOUS_TIMEOUT, "not every node joined"),
        ("port_in_use.log", dx.PORT_IN_USE, "port 29534 is already in use"),
        ("port_in_use_client.log", dx.RENDEZVOUS_CONNECT, "Connection reset by peer"),
        ("errfile_crash_node0.log", dx.PEER_LOST, "127.0.0.1:19841"),
    ],
)
def test_each_pattern_is_recognised_in_real_output(name: str, kind: str, says: str) -> None:
    found = [d for line in (DATA / name).read_text().splitlines() if (d := dx.recognise(line))]
    assert any(d.kind == kind and says in d.summary for d in found), found


# One line each rule matches (the captured logs above hold some; these cover every rule).
RULE_EXAMPLES = [
    "[rank1]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=10000) ran for "
    "10001 milliseconds before timing out.",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting "
    "5000ms for recv operation to complete",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "Duplicate GPU detected : rank 3 and rank 1 both on CUDA device 70",
    "RuntimeError: The server socket has failed to listen on any local network address. "
    "port: 29534, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
    "OSError: [Errno 98] Address already in use",
    "The client socket has timed out after 60000ms while trying to connect to (10.0.0.1, 29400).",
    "TCP client failed to connect/validate to host 10.0.0.1:29400 - retrying: Connection reset",
    "ConnectionRefusedError: [Errno 111] Connection refused",
    "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the "
    "C10d store has failed.",
    "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
    "The RENDEZVOUS has TIMED OUT",
    "RuntimeError: Connection closed by peer [127.0.0.1]:19841",
    "Connection reset by peer",
    "Failed to recv, got 0 bytes",
]


def test_the_cheap_first_look_lets_every_failure_through() -> None:
    lines = RULE_EXAMPLES + [
        line for path in sorted(DATA.glob("*.log")) for line in path.read_text().splitlines()
    ]
    kinds = set()
    for line in lines:
        diagnosis = dx.recognise(line)
        if diagnosis is not None:
            kinds.add(diagnosis.kind)
            assert dx.may_report_failure(line), line
    rules = {kind for kind, _pattern, _describe in dx._RULES}
    assert kinds == rules
    patterns = {pattern.pattern for _kind, pattern, _describe in dx._RULES}
    seen = {p.pattern for _k, p, _d in dx._RULES for line in lines if p.search(line)}
    assert seen == patterns  # every rule, not only every kind, met an example
    assert not dx.may_report_failure("step 7 loss=0.31 lr=3e-4\n[RANK 0] Epoch 2 | Steps: 8")


def test_the_default_progress_pattern_matches_as_the_plain_one_does() -> None:
    plain = re.compile(r"(?i)\b(?:epoch|steps?|iter(?:ation)?)\b\s*[:=]?\s*(\d+)")
    default = re.compile(DEFAULT_PROGRESS_PATTERN)
    texts = [
        "Epoch 3",
        "EPOCH=4",
        "steps: 12",
        "Step12",
        "mystep 3",
        "step-ok 5",
        "iteration 9",
        "ITERATIONS 9",
        "iter7",
        "xiter 7",
        "last epoch: 8 step 9",
        "re-step 4",
        "_step 5",
        "steps=",
        "Iter 1 of 10",
        "preepoch 3 epoch 4",
    ]
    for text in texts:
        a, b = plain.search(text), default.search(text)
        assert (a and (a.span(), a.groups())) == (b and (b.span(), b.groups())), text


def test_ordinary_lines_are_not_failures() -> None:
    for name in ("success_node0.log", "success_node1.log"):
        for line in (DATA / name).read_text().splitlines():
            assert dx.recognise(line) is None, line


@pytest.mark.parametrize(
    ("code", "name"),
    [(-9, "SIGKILL"), (137, "SIGKILL"), (-15, "SIGTERM"), (143, "SIGTERM"), (-6, "SIGABRT")],
)
def test_exit_codes_that_are_signals(code: int, name: str) -> None:
    assert dx.signal_name(code) == name
    assert dx.describe_exit(code) == name


def test_plain_exit_codes() -> None:
    assert dx.signal_name(1) is None
    assert dx.describe_exit(1) == "exit 1"
    assert dx.describe_exit(None) == "?"


# -- torchrun's failure summary ----------------------------------------------------------


def test_summary_with_error_file_and_traceback() -> None:
    parser = AgentLogParser()
    facts = []
    for line in (DATA / "errfile_crash_node0.log").read_text().splitlines():
        facts += parser.feed(line)
    summary = [f for f in facts if isinstance(f, WorkerFailed) and f.from_summary]
    root = next(f for f in summary if f.root_cause)
    assert (root.rank, root.local_rank, root.exit_code) == (1, 1, 1)
    assert root.host == "localhost"
    assert root.time == "2026-11-26_04:21:49"
    assert root.pid == 32162
    assert root.error_file.endswith("/attempt_0/1/error.json")
    assert root.traceback[0] == "Traceback (most recent call last):"
    assert root.traceback[-1] == (
        "RuntimeError: envcheck: deliberate failure on rank 1 (--fail-rank)"
    )
    other = next(f for f in summary if not f.root_cause)
    assert other.rank == 0 and "Connection closed by peer" in other.traceback[-1]


def test_summary_lines_are_not_reported_as_agent_trouble() -> None:
    parser = AgentLogParser()
    facts = []
    for line in (DATA / "errfile_crash_node1.log").read_text().splitlines():
        if not line.startswith("[ddptui:"):
            facts += parser.feed(line)
    assert not [f for f in facts if isinstance(f, AgentTrouble)]


def test_crash_root_cause_is_the_first_observed_failure_across_nodes() -> None:
    monitor, events = replay("errfile_crash_node0.log", "errfile_crash_node1.log")
    reports = [e.failure for e in events if isinstance(e, FailureReport)]
    assert len(reports) == 4
    first, *rest = ordered_failures(monitor.board)
    assert (first.node, first.rank, first.exit_code) == ("n0", 1, 1)
    assert first.error == "RuntimeError: envcheck: deliberate failure on rank 1 (--fail-rank)"
    assert first.root_cause and first.error_file
    # exactly one root cause; the other node's first failure (a lost peer, a second later)
    # is the first victim
    assert [r.root_cause for r in rest] == [False, False, False]
    assert (rest[0].node, rest[0].rank, rest[0].first_on_node) == ("n1", 2, True)
    assert {r.cause for r in rest} == {causes.PEER}
    assert kinds(monitor, "n0", 1) == [dx.TRACEBACK, dx.EXITED]
    assert dx.PEER_LOST in kinds(monitor, "n0", 0)


def test_sigkill_shows_the_signal_and_where_the_agent_saw_it() -> None:
    monitor, _ = replay("sigkill_node0.log", "sigkill_node1.log")
    cell = monitor.board.cell("n0", 1)
    assert cell is not None and cell.state == RankState.FAILED and cell.exit_code == -9
    first = ordered_failures(monitor.board)[0]
    assert (first.rank, first.signal) == (1, "SIGKILL")
    assert first.error == "Signal 9 (SIGKILL) received by PID 909"
    exited = [d for d in cell.diagnoses if d.kind == dx.EXITED]
    assert exited and exited[0].summary == "the worker ended: SIGKILL"
    first_line = failures.first_error(cell.diagnoses)
    assert first_line is not None and first_line.seq == exited[0].seq
    # n1's agent then loses the store n0 hosted: after its rendezvous, that is no news
    for local_rank in (0, 1):
        assert kinds(monitor, "n1", local_rank) == []


def test_nccl_watchdog_timeout_from_a_gpu_host() -> None:
    monitor, _ = replay("gpu_nccl_timeout.log")
    cell = monitor.board.cell("n0", 0)
    assert cell is not None
    assert cell.exit_code == -6
    watchdog = cell.diagnoses[0]
    assert watchdog.kind == dx.COLLECTIVE_TIMEOUT
    assert "Watchdog caught collective operation timeout" in watchdog.line
    assert ordered_failures(monitor.board)[0].signal == "SIGABRT"


def test_cuda_oom_from_a_gpu_host() -> None:
    monitor, _ = replay("gpu_cuda_oom.log")
    assert kinds(monitor, "n0", 1)[:2] == [dx.TRACEBACK, dx.CUDA_OOM] or dx.CUDA_OOM in kinds(
        monitor, "n0", 1
    )
    cell = monitor.board.cell("n0", 1)
    assert cell is not None and cell.error.startswith("torch.OutOfMemoryError: CUDA out of memory")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("rdzv_timeout.log", dx.RENDEZVOUS_TIMEOUT),
        ("rdzv_refused.log", dx.RENDEZVOUS_CONNECT),
        ("port_in_use.log", dx.PORT_IN_USE),
    ],
)
def test_rendezvous_failures_attach_to_the_waiting_ranks(name: str, kind: str) -> None:
    monitor, events = replay(name)
    for local_rank in (0, 1):
        assert kinds(monitor, "n0", local_rank)[0] == kind
    changed = [e for e in events if isinstance(e, RankChanged) and e.diagnoses]
    assert changed and changed[0].state == RankState.PENDING
    monitor.board.node_exited("n0", 1)
    summary = rank_summaries(monitor.board)[0]
    assert summary.state == RankState.FAILED and summary.diagnoses[0].kind == kind


def test_gloo_timeout_marks_the_waiting_ranks() -> None:
    monitor, _ = replay("gloo_timeout_node0.log", "gloo_timeout_node1.log")
    assert dx.COLLECTIVE_TIMEOUT in kinds(monitor, "n0", 0)
    assert dx.COLLECTIVE_TIMEOUT in kinds(monitor, "n1", 0)
    assert kinds(monitor, "n1", 1) == []  # the silent rank: torchrun stopped it (SIGTERM)


# -- hangs, stragglers, restarts ----------------------------------------------------------


def progress(monitor: JobWatch, rank: int, epoch: int, now: float) -> None:
    line = f"[ddptui:{rank}:{rank}]:[RANK {rank}] Epoch {epoch} | Batchsize: 32 | Steps: 8\n"
    monitor.feed("n0", line.encode(), now=now)


def test_a_rank_well_behind_the_others_is_a_straggler() -> None:
    monitor = JobWatch(["n0"], 3)
    for second in range(20):
        for rank in (0, 1):
            progress(monitor, rank, second, float(second))
        if second % 4 == 0:
            progress(monitor, 2, second // 4, float(second))
    events = monitor.board.mark_stragglers(slow_by_step_rate(monitor.board, 20.0))
    assert [(e.rank, e.straggler) for e in events if isinstance(e, RankChanged)] == [(2, True)]
    assert "straggler" in events[0].detail
    assert (
        monitor.board.mark_stragglers(slow_by_step_rate(monitor.board, 20.5)) == []
    )  # no news, no event
    for second in range(20, 80):  # it catches up
        for rank in (0, 1, 2):
            progress(monitor, rank, second, float(second))
    back = monitor.board.mark_stragglers(slow_by_step_rate(monitor.board, 80.0))
    assert [(e.rank, e.straggler) for e in back if isinstance(e, RankChanged)] == [(2, False)]


def test_progress_pattern_is_configurable() -> None:
    monitor = JobWatch(["n0"], 2, progress_pattern=r"it=(\d+)")
    for second in range(10):
        monitor.feed("n0", f"[ddptui:0:0]:it={second * 10}\n".encode(), now=float(second))
        if second % 4 == 0:
            monitor.feed("n0", f"[ddptui:1:1]:it={second}\n".encode(), now=float(second))
    flagged = monitor.board.mark_stragglers(slow_by_step_rate(monitor.board, 10.0))
    assert [e.rank for e in flagged if isinstance(e, RankChanged)] == [1]


def test_default_progress_pattern_reads_the_usual_lines() -> None:
    pattern = dx.compile_progress(DEFAULT_PROGRESS_PATTERN)
    assert pattern is not None
    for text, value in [
        ("[RANK 3] Epoch 49 | Batchsize: 32 | Steps: 8", 49.0),
        ("step=120 loss=0.3", 120.0),
        ("Steps: 8", 8.0),
        ("iter 7 done", 7.0),
    ]:
        assert dx.progress_value(pattern, text) == value
    assert dx.progress_value(pattern, "hello from 0") is None


def test_bad_progress_pattern_is_refused() -> None:
    with pytest.raises(SpecError, match="progress_pattern: .*not a regular expression"):
        make_spec(script="x.py", progress_pattern="Epoch (")


def test_hung_rank_gets_a_diagnosis() -> None:
    monitor = JobWatch(["n0"], 2)
    monitor.feed("n0", b"[ddptui:0:0]:a\n[ddptui:1:1]:b\n", now=100.0)
    monitor.feed("n0", b"[ddptui:0:0]:still going\n", now=200.0)
    events = check_hangs(monitor.board, now=201.0, timeout=60.0)
    assert isinstance(events[0], RankChanged)
    assert events[0].diagnoses[0].kind == dx.HUNG


def test_restarts_are_carried_on_rank_events() -> None:
    from ddptui.core.monitor.agent_log import Assigned

    monitor = JobWatch(["n0"], 1)
    monitor.board.assign("n0", Assigned(0, (0,), (0,), 0))
    monitor.feed("n0", b"[ddptui:0:0]:running\n")
    events = monitor.board.assign("n0", Assigned(0, (0,), (0,), 2))
    assert isinstance(events[0], RankChanged) and events[0].restarts == 2
    assert rank_summaries(monitor.board)[0].restarts == 2


def test_events_with_diagnoses_and_failures_are_json() -> None:
    monitor, events = replay("errfile_crash_node0.log", "errfile_crash_node1.log")
    for event in events:
        json.loads(event.to_json())  # type: ignore[attr-defined]
    summary = RunSummary(
        False,
        4,
        tuple(rank_summaries(monitor.board)),
        "/tmp/run",
        "run",
        failures=tuple(ordered_failures(monitor.board)),
    )
    data = json.loads(summary.to_json())
    assert data["failures"][0]["rank"] == 1 and data["failures"][0]["root_cause"]
    assert data["ranks"][1]["diagnoses"][0]["kind"] == "traceback"
    assert Diagnosis("x", "y").seq is None
