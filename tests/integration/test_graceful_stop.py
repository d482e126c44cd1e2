"""A graceful stop over SSH: the stop signal straight to every worker, its handler given the
whole grace, the torchrun agents left to end on their own, then nothing left on any host."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from testbed.netns import Testbed
from tests.cases import ROOT
from tests.integration.sshrun import all_running, popen_headless
from tests.procs import outputs

WORKER = ROOT / "tests" / "data" / "graceful" / "worker.py"
HOSTS = ["node1", "node2"]


def test_a_sixty_second_handler_is_given_its_sixty_seconds(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    tb = clean_testbed
    out = tmp_path / "ckpt"
    proc = popen_headless(
        tb,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--nproc-per-node",
        "1",
        "--grace",
        "70",
        str(WORKER),
        "--ckpt-dir",
        str(out),
        "--handler-s",
        "60",
        "--stop-on",
        "TERM",
    )
    try:
        all_running(proc, world=2)
    except AssertionError:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(err[-3000:]) from None
    asked = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, _ = outputs(proc, 240)
    took = time.monotonic() - asked
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]

    # torchrun would have killed them 30 s after its SIGTERM: each ran its whole handler
    for rank in (0, 1):
        name, seconds = (out / f"rank{rank}.ckpt").read_text().split()
        assert name == "SIGTERM" and float(seconds) >= 59.0, (rank, name, seconds)
    assert 60 <= took < 70 + 60, took
    teardown = {e["node"]: e for e in events if e["event"] == "teardown"}
    assert sorted(teardown) == HOSTS
    for report in teardown.values():
        assert report["clean"], report
        assert "needed SIGKILL" not in report["detail"], report  # the agent ended by itself
    assert not tb.wait_clean(HOSTS)
