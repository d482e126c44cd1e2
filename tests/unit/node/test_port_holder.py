"""Who holds a port, as the node helper finds it: /proc/net/tcp and /proc/*/fd, real sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from ddptui.core.node.netinfo import holder_words, port_holders, port_report
from ddptui.core.node.reaper import TAG_VAR

HOLD = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
)


def test_a_held_port_names_its_process_user_command_and_job_tag() -> None:
    env = {**os.environ, TAG_VAR: "run-1.0"}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, "squatter"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        report = port_report("127.0.0.1", port, TAG_VAR)
        assert report["free"] is False
        [found] = report["holders"]
        assert (found["pid"], found["tag"]) == (holder.pid, "run-1.0")
        assert found["user"] == "root" if os.getuid() == 0 else found["uid"] == os.getuid()
        assert found["cmd"].startswith(sys.executable) and found["cmd"].endswith("squatter")
        assert report["why"] == "in use by " + holder_words(found)
        assert report["why"].startswith(f"in use by PID {holder.pid} (user {found['user']}, ")
        free = report["free_port"]
        assert isinstance(free, int) and free != port
        assert port_report("127.0.0.1", free)["free"] is True
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while port_holders(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert port_holders(port) == []


def test_a_free_port_has_no_holder() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert port_report("127.0.0.1", port) == {
        "free": True,
        "error": "",
        "port": port,
        "addr": "127.0.0.1",
    }


def test_the_words_of_a_holder_this_user_cannot_see() -> None:
    hidden = {"pid": None, "uid": 1001, "user": "alice", "cmd": "", "tag": ""}
    assert holder_words(hidden) == "a process of user alice (this user cannot see which)"
    long = {"pid": 7, "user": "bob", "cmd": "python3 " + "x" * 80, "tag": ""}
    assert holder_words(long).endswith("...)") and len(holder_words(long)) < 90
