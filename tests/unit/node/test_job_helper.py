"""The node helper's probe, run as the console runs it: `python3 - probe [ADDR PORT]`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from ddptui.core.node import job_helper_source
from ddptui.core.node.job_helper import TAG_VAR


def _probe(*args: str) -> dict[str, object]:
    cp = subprocess.run(
        [sys.executable, "-", "probe", *args],
        input=job_helper_source(),
        capture_output=True,
        check=True,
        timeout=30,
    )
    report: dict[str, object] = json.loads(cp.stdout.decode().strip().splitlines()[-1])
    return report


def test_probe_names_the_interface_of_each_address() -> None:
    report = _probe()
    assert report["ifaces"] == {**report["ifaces"], "127.0.0.1": "lo"}  # type: ignore[dict-item]
    assert "port" not in report


def test_probe_also_checks_the_rendezvous_port_when_asked() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        busy = _probe("127.0.0.1", str(taken))["port"]
    assert busy == {
        "free": False,
        "error": "Address already in use",
        "port": taken,
        "addr": "127.0.0.1",
    }
    free = _probe("127.0.0.1", str(taken))["port"]
    assert free == {"free": True, "error": "", "port": taken, "addr": "127.0.0.1"}


AGENT = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: None)  # an agent slow to shut down\n"
    "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(worker.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_reap_kills_an_agent_left_alone_without_waiting_out_the_grace() -> None:
    tag = f"unit-reap-{os.getpid()}"
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT],
        env={**os.environ, TAG_VAR: tag},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        worker = int(agent.stdout.readline())
        # A 60 s grace: were the lone agent waited out, this would pass the 20 s timeout.
        cp = subprocess.run(
            [sys.executable, "-", "reap", tag, "60"],
            input=job_helper_source(),
            capture_output=True,
            check=True,
            timeout=20,
        )
        report = json.loads(cp.stdout.decode().strip().splitlines()[-1])
        names = report.pop("names")
        assert report == {"found": 2, "killed": [agent.pid], "leftover": []}
        assert names[str(agent.pid)].startswith(sys.executable)  # said by name, not only pid
        assert agent.wait(timeout=5) == -signal.SIGKILL
        assert not os.path.exists(f"/proc/{worker}") or _zombie(worker)
    finally:
        agent.kill()
        agent.wait()


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"
