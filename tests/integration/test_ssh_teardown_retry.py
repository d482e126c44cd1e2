"""A teardown over SSH whose held connection is lost: the node is checked again over a new
one (real sshd in network namespaces, a real link cut)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from testbed.netns import Testbed
from tests.integration.sshrun import TRAINER, all_running, popen_headless, read_until
from tests.procs import outputs


def test_a_connection_lost_as_the_teardown_begins_is_replaced_to_prove_the_node_clean(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    """The link to the host drops just as the operator tears down: the reap over the held
    connection fails once its keepalives go unanswered, and the host is checked again over a
    new connection once the link is back, not left running and reported unchecked. One
    host, so that nothing else ends its job meanwhile (with two, node2's ranks end when
    node1's do). asyncssh: paramiko's keepalives expect no reply, so it waits out the reap's
    time, and a reap that ran out of time is not repeated."""
    tb = clean_testbed
    proc = popen_headless(
        tb, tmp_path / "state", "--hosts", "node2", str(TRAINER / "envcheck.py"),
        "--sleep", "300",
    )  # fmt: skip
    all_running(proc, world=2)
    tb.cut_link("node2")
    proc.send_signal(signal.SIGTERM)
    seen = read_until(
        proc,
        lambda e: (
            e["event"] == "notice" and "node2" in e["message"] and "new connection" in e["message"]
        ),
    )
    assert seen[-1]["event"] == "notice", seen[-3:]  # the reap failed, and is tried again
    assert tb.left_on(["node2"]), "the cut node's job still runs: nothing reached it"
    tb.restore_link("node2")
    out, _ = outputs(proc, 120)
    events = seen + [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    teardown = {e["node"]: e for e in events if e["event"] == "teardown"}
    assert teardown["node2"]["clean"], teardown
    assert int(teardown["node2"]["detail"].split()[0]) >= 3, teardown["node2"]  # it found the job
    assert not tb.wait_clean(["node2"])
