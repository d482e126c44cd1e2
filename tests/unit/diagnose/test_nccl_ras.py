"""NCCL RAS's text answers read (tests/data/ras/), compared, gated by version, folded in."""

from __future__ import annotations

from pathlib import Path

from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.diagnose.nccl_ras import may_ask, parse, report, said, version_of
from ddptui.core.diagnose.verdict import VerdictReport

DATA = Path(__file__).resolve().parents[2] / "data" / "ras"


def _text(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


def test_a_skipped_all_reduce_shows_as_rank_1_behind_and_frozen() -> None:
    answer = parse(_text("skipped_all_reduce"))
    assert answer.version == (2, 28, 9)
    assert [(g.status, g.errors, g.ranks_per_comm) for g in answer.groups] == [
        ("RUNNING", "MISMATCH", 2)
    ]
    assert [(r.rank, r.ops, r.op, r.node) for r in answer.behind()] == [(1, 4, "AllReduce", "gpu1")]
    lines = said(answer, answer, 5.0)
    assert "rank 1 launched AllReduce operations up to 4 only (process 661 on gpu1)" in lines
    assert "operation counts unchanged over 5 s: communicator frozen" in lines
    assert not answer.healthy


def test_counts_that_moved_are_not_frozen() -> None:
    first = parse(_text("skipped_all_reduce"))
    second = parse(_text("skipped_all_reduce").replace("operation 5 --", "operation 6 --"))
    assert not [line for line in said(first, second, 5.0) if "frozen" in line]


def test_dead_and_missing_processes() -> None:
    answer = parse(_text("dead_and_missing"))
    assert answer.dead_count == 1 and answer.timeouts == 1
    assert [(r.pid, r.node) for r in answer.dead] == [(7122, "node2")]
    assert 3 in {r.rank for r in answer.missing}
    lines = said(answer, answer, 5.0)
    assert "dead: process 7122 on node2" in lines
    assert "no answer from rank 3: process 7123 on node2" in lines


def test_healthy_during_a_watchdog_timeout_is_said_as_such_never_as_all_clear() -> None:
    """NVIDIA/nccl#1730: RAS said RUNNING/OK while the watchdog timed out."""
    answer = parse(_text("healthy_during_timeout"))
    assert answer.healthy and answer.version == (2, 26, 2)
    assert any("#1730" in line for line in said(answer, answer, 5.0))


def test_versions_with_known_ras_faults_are_not_asked() -> None:
    assert may_ask((2, 28, 9)) == (True, "")
    for version in ((2, 26, 2), (2, 26, 5), (2, 27, 3), (2, 27, 7)):
        ok, why = may_ask(version)
        assert not ok and "#1718" in why
    assert not may_ask((2, 21, 5))[0] and not may_ask(None)[0]
    assert version_of("SERVER PROTOCOL 2\nOK\nNCCL version 2.28.9+cuda13.0 compiled") == (2, 28, 9)


def test_the_answer_joins_the_stalls_verdict_as_evidence_never_alone() -> None:
    m = JobWatch(["gpu1"], 2)
    m.feed("gpu1", b"[ddptui:0:0]:step 0\n[ddptui:1:1]:step 0\n", now=1.0)
    text = _text("skipped_all_reduce")
    told = report({"gpu1": text}, {"gpu1": text}, 5.0, now=30.0)
    assert told.suspects == (1,) and told.to_dict()["nodes"]["gpu1"]
    events = m.ras_taken(told)
    assert events[0] is told
    assert not [c for c in m.board.all_cells() if c.suspect]  # RAS alone marks no one
    assert not [e for e in events if isinstance(e, VerdictReport)]  # nothing failed yet
    broken = report({"gpu1": OSError("refused")}, {"gpu1": text}, 5.0, now=31.0)
    assert broken.problems and not broken.nodes


def test_the_node_side_client_speaks_the_protocol_to_a_ras_port() -> None:
    """ras_query.py against a listener that answers as NCCL's RAS thread does."""
    import json
    import socket
    import subprocess
    import sys
    import threading

    from ddptui.core.node import STDIN_PROGRAM, ras_query_source

    body = _text("skipped_all_reduce").split("OK\n", 1)[1]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    heard: list[str] = []

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"STATUS\n" not in data:
                data += conn.recv(1024)
            heard.append(data.decode())
            conn.sendall(b"SERVER PROTOCOL 2\nOK\n" + body.encode())

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-S", "-c", STDIN_PROGRAM, "ras", f"127.0.0.1:{port}", "2"],
        input=ras_query_source(),
        capture_output=True,
        timeout=30,
        env={"PATH": "/nonexistent"},  # no ncclras: the port is asked
    )
    server.close()
    said_back = json.loads(done.stdout.decode().splitlines()[-1])
    assert said_back["via"] == "socket"
    assert heard == ["CLIENT PROTOCOL 2\nTIMEOUT 2\nSTATUS\n"]
    assert parse(said_back["text"]).behind()[0].rank == 1
