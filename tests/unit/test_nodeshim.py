"""The node helper's probe, run as the console runs it: `python3 - probe [ADDR PORT]`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from ddptui.core.backends.base import shim_source


def _probe(*args: str) -> dict[str, object]:
    cp = subprocess.run(
        [sys.executable, "-", "probe", *args],
        input=shim_source(),
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
