"""Each SSH host's job starts as soon as its own connection is up, not once every host is
connected: on real hosts (network namespaces, real sshd), with one host held back.

The held-back host is node3 with its listening sshd stopped (SIGSTOP): the kernel still
completes its TCP handshakes, but no SSH banner comes until the sshd is continued (a slow
host) or killed (an unusable one). Meanwhile the console must already have started the job on
node1 and node2; whatever node3 turns out to be, the outcome and the teardown are what they
are when every host answers at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.netns import Testbed
from tests.integration.sshrun import TRAINER, popen_headless
from tests.procs import outputs

HOSTS = ["node1", "node2", "node3"]
# The held-back host's connection may wait this long (the default, 10 s, could run out on a
# loaded machine before node1 and node2 are seen running); the test ends the wait itself.
PROFILE = (
    "[profiles.slowhost]\nnproc_per_node = 1\n\n[profiles.slowhost.ssh]\nconnect_timeout = 120\n"
)
SEEN_WITHIN_S = 90.0  # a bound on waiting for the other hosts' agents, not a speed check


def _agents(tb: Testbed, host: str) -> list[str]:
    return [p for p in tb.describe_pids(host) if "torchrun" in p]


@pytest.fixture
def held_back(clean_testbed: Testbed) -> Iterator[tuple[Testbed, int]]:
    """The testbed with node3's sshd stopped; continued afterwards (the reset restarts it
    if the test killed it)."""
    assert clean_testbed.ssh is not None
    pid = clean_testbed.ssh.sshd_pid("node3")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield clean_testbed, pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def _start(tb: Testbed, tmp_path: Path, engine: str, *script: str) -> subprocess.Popen[str]:
    (tmp_path / "ddptui.toml").write_text(PROFILE)
    return popen_headless(
        tb,
        tmp_path / "state",
        "--profile",
        "slowhost",
        "--hosts",
        "node[1-3]",
        "--ssh-engine",
        engine,
        str(TRAINER / "envcheck.py"),
        *script,
    )


def _started_before_node3(tb: Testbed, proc: subprocess.Popen[str]) -> None:
    """node1's and node2's agents run while node3 has not answered (its sshd is stopped)."""
    deadline = time.monotonic() + SEEN_WITHIN_S
    while not (_agents(tb, "node1") and _agents(tb, "node2")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, (tb.describe_pids("node1"), tb.describe_pids("node2"))
        time.sleep(0.2)
    assert not _agents(tb, "node3")
    assert proc.poll() is None  # still waiting for node3


def _events(proc: subprocess.Popen[str]) -> list[dict]:
    out, err = outputs(proc, 240)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert events and events[-1]["event"] == "summary", (events[-5:], err)
    return events


@pytest.mark.parametrize("engine", ["asyncssh", "paramiko"])
def test_slow_host_does_not_hold_back_the_others_start(
    held_back: tuple[Testbed, int], tmp_path: Path, engine: str
) -> None:
    tb, sshd = held_back
    proc = _start(tb, tmp_path, engine)
    try:
        _started_before_node3(tb, proc)
    finally:
        os.kill(sshd, signal.SIGCONT)  # node3 answers now
    events = _events(proc)
    summary = events[-1]
    assert proc.returncode == 0 and summary["ok"], summary
    ranks = {r["rank"]: r["state"] for r in summary["ranks"]}
    assert ranks == {0: "done", 1: "done", 2: "done"}
    node3 = [e["state"] for e in events if e["event"] == "node" and e["node"] == "node3"]
    assert node3[:2] == ["connecting", "authenticated"] and node3[-1] == "exited", node3
    for host in ("node1", "node2"):  # started once: one launch, one run of the job
        states = [e["state"] for e in events if e["event"] == "node" and e["node"] == host]
        assert states.count("launched") == 1 and states[-1] == "exited", states
    teardown = {e["node"]: e["clean"] for e in events if e["event"] == "teardown"}
    assert teardown == {h: True for h in HOSTS}
    assert not tb.wait_clean(HOSTS)


@pytest.mark.parametrize("engine", ["asyncssh", "paramiko"])
def test_host_lost_while_others_started_is_reported_and_they_are_torn_down(
    held_back: tuple[Testbed, int], tmp_path: Path, engine: str
) -> None:
    tb, sshd = held_back
    assert tb.ssh is not None
    proc = _start(tb, tmp_path, engine, "--sleep", "300")
    _started_before_node3(tb, proc)
    os.kill(sshd, signal.SIGKILL)  # node3's pending connection is reset: it cannot be used
    tb.ssh.stop_sshd("node3")  # collects it (the fixture's reset starts a new one)
    events = _events(proc)
    summary = events[-1]
    assert proc.returncode == 1 and not summary["ok"]
    detail = summary["detail"]
    # the story's lead: refused before any rank ran, in the backend's words
    said = "refused before launch — 1 of 3 host(s) unusable: node3: cannot connect"
    assert detail.startswith(said) and summary["headline"] == detail.splitlines()[0], detail
    assert "node1" not in detail and "node2" not in detail
    # The hosts started meanwhile are stopped and proven clean, as the session's teardown
    # proves every host it started.
    teardown = {e["node"]: e for e in events if e["event"] == "teardown"}
    assert set(teardown) == {"node1", "node2"}
    assert all(t["clean"] for t in teardown.values()), teardown
    assert not tb.wait_clean(HOSTS)


def test_operator_stop_while_a_host_connects_tears_down_those_started(
    held_back: tuple[Testbed, int], tmp_path: Path
) -> None:
    tb, _ = held_back
    proc = _start(tb, tmp_path, "asyncssh", "--sleep", "300")
    _started_before_node3(tb, proc)
    proc.send_signal(signal.SIGTERM)  # what `q` does in the console
    events = _events(proc)
    summary = events[-1]
    assert summary["stopped_by"] == "operator" and not summary["ok"], summary
    teardown = {e["node"]: e for e in events if e["event"] == "teardown"}
    assert set(teardown) == {"node1", "node2"}
    assert all(t["clean"] for t in teardown.values()), teardown
    assert not tb.wait_clean(HOSTS)
