"""`ddptui preflight` over real SSH: three hosts (network namespaces, each its own sshd), and
one host at a time made to fail a check for real, then put back."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.netns import Testbed
from tests.integration.sshrun import TRAINER, ddptui_argv, state_env

pytestmark = pytest.mark.integration
HOSTS = ["node1", "node2", "node3"]
CHECKS = [
    *("reachable", "python", "torch", "gpu", "settings", "rdzv-port", "hostname", "clock"),
    *("disk", "script"),
    "gang",
]


class Preflight:
    def __init__(self, code: int, events: list[dict[str, Any]], stderr: str) -> None:
        self.code, self.events, self.stderr = code, events, stderr
        self.checks = {(e["node"], e["check"]): e for e in events if e["event"] == "check"}
        self.summary = events[-1] if events and events[-1]["event"] == "preflight" else {}

    def status(self, node: str, check: str) -> str:
        return str(self.checks[(node, check)]["status"])

    def failed(self) -> set[tuple[str, str]]:
        return {k for k, e in self.checks.items() if e["status"] == "fail"}

    def __repr__(self) -> str:
        bad = [e for e in self.checks.values() if e["status"] != "ok"]
        return f"Preflight(code={self.code}, not ok={bad}, stderr={self.stderr[-2000:]!r})"


def preflight(tb: Testbed, tmp: Path, *args: str, hosts: str = "node[1-3]") -> Preflight:
    argv = ddptui_argv(
        tb, "preflight", "--headless", "--hosts", hosts, *args, str(TRAINER / "envcheck.py")
    )
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp,
        env=state_env(tmp / "state"),
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return Preflight(proc.returncode, events, proc.stderr)


@contextlib.contextmanager
def edited(path: Path, edit: Any) -> Iterator[None]:
    """Rewrite a file in place (same inode: bind mounts of it see the change), then restore."""
    original = path.read_text()
    path.write_text(edit(original))
    try:
        yield
    finally:
        path.write_text(original)


def host_lines_to(text: str, host: str, address: str) -> str:
    kept = [line for line in text.splitlines() if host not in line.split()[1:]]
    return "\n".join([*kept, f"{address} {host}"]) + "\n"


def test_a_healthy_cluster_passes_every_check(testbed: Testbed, tmp_path: Path) -> None:
    run = preflight(testbed, tmp_path)
    assert run.code == 0, run
    assert set(run.checks) == {(h, c) for h in HOSTS for c in CHECKS}
    assert {e["status"] for e in run.checks.values()} == {"ok"}, run
    assert run.checks[("node1", "reachable")]["detail"] == f"node1 at {testbed.host_ip('node1')}"
    assert run.checks[("node2", "gpu")]["detail"] == "no GPU (CPU job: gloo)"
    head = f"node1 ({testbed.host_ip('node1')}:29400)"
    assert run.checks[("node3", "rdzv-port")]["detail"].startswith(f"reached {head}")
    assert run.checks[("node2", "hostname")]["detail"] == f"node2 -> {testbed.host_ip('node2')}"
    # the gang test ran over SSH as the job would: torchrun on every host, gloo between them
    gang = [run.checks[(h, "gang")]["detail"] for h in HOSTS]
    assert all(" GB/s (gloo, " in d for d in gang), gang
    assert run.summary["ok"] is True and run.summary["nodes"] == HOSTS


def test_hostname_on_loopback_is_caught_on_that_host(testbed: Testbed, tmp_path: Path) -> None:
    """Debian's trap: the host's own name on 127.0.1.1 (gloo would pick loopback)."""
    hosts_file = testbed.hosts_file("node2")
    with edited(hosts_file, lambda t: host_lines_to(t, "node2", "127.0.1.1")):
        run = preflight(testbed, tmp_path)
    assert run.code == 1, run
    assert run.failed() == {("node2", "hostname")}, run
    bad = run.checks[("node2", "hostname")]
    assert "resolves to 127.0.1.1 (loopback)" in bad["detail"]
    assert f"map node2 to {testbed.host_ip('node2')} in /etc/hosts" in bad["fix"]
    assert "--socket-ifname eth0" in bad["fix"]
    assert run.summary["failed"] == ["node2: hostname"]


def test_nodes_disagreeing_about_an_address_is_caught(testbed: Testbed, tmp_path: Path) -> None:
    wrong = testbed.host_ip("node3").rsplit(".", 1)[0] + ".99"
    with edited(testbed.hosts_file("node1"), lambda t: host_lines_to(t, "node3", wrong)):
        run = preflight(testbed, tmp_path)
    assert run.code == 1, run
    assert run.failed() == {("node1", "hostname")}, run
    detail = run.checks[("node1", "hostname")]["detail"]
    assert f"resolves node3's hostname 'node3' to {wrong}, not {testbed.host_ip('node3')}" in detail
    assert (
        "correct node3 in /etc/hosts (or DNS) on node1" in run.checks[("node1", "hostname")]["fix"]
    )


SQUAT = (  # SO_REUSEADDR as servers do: earlier checks leave connections in TIME_WAIT
    "import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
    "s.bind(('0.0.0.0',29400));s.listen();time.sleep(600)"
)


def test_a_squatted_rendezvous_port_on_the_first_node(testbed: Testbed, tmp_path: Path) -> None:
    squatter = testbed.exec("node1", [sys.executable, "-c", SQUAT])
    try:
        deadline = time.monotonic() + 30
        while "29400" not in testbed.run("node1", ["ss", "-ltn"]).stdout:
            assert time.monotonic() < deadline, "the squatter did not listen"
            time.sleep(0.1)
        run = preflight(testbed, tmp_path)
    finally:
        squatter.kill()
        squatter.wait(30)
    assert run.code == 1, run
    assert run.failed() == {("node1", "rdzv-port")}, run
    bad = run.checks[("node1", "rdzv-port")]
    assert "port 29400 cannot be opened here: Address already in use" in bad["detail"]
    assert "--rdzv-port" in bad["fix"]
    assert run.status("node2", "rdzv-port") == run.status("node3", "rdzv-port") == "skip"
    other = preflight(testbed, tmp_path, "--rdzv-port", "29411")
    assert other.code == 0, other


def stub_torch_venv(where: Path, version: str | None) -> Path:
    """A real second installation: a venv (no system site-packages) with its own `torch`."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    if version is not None:
        site = next(where.glob("lib/python3*/site-packages"))
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    return where / "bin"


@contextlib.contextmanager
def host_python(tb: Testbed, host: str, venv_bin: Path) -> Iterator[None]:
    """That host's python3 is the venv's: its sshd puts the venv first on PATH, and pyenv
    (root's .bashrc puts its shims in front) is told to use the python3 found on PATH."""
    config = tb.ssh.dir / host / "sshd_config"
    original = config.read_text()
    config.write_text(
        original.replace("SetEnv PATH=", f"SetEnv PYENV_VERSION=system PATH={venv_bin}:")
    )
    tb.ssh.stop_sshd(host)
    tb.ssh.start_sshd(host)
    try:
        yield
    finally:
        config.write_text(original)
        tb.ssh.stop_sshd(host)
        tb.ssh.start_sshd(host)


def test_another_torch_on_one_host(testbed: Testbed, tmp_path: Path) -> None:
    venv_bin = stub_torch_venv(tmp_path / "old-torch", "1.13.1")
    with host_python(testbed, "node2", venv_bin):
        run = preflight(testbed, tmp_path)
        assert run.code == 1, run
        assert run.failed() == {("node2", "torch")}, run
        detail = run.checks[("node2", "torch")]["detail"]
        assert detail.startswith("torch 1.13.1 (") and "old-torch" in detail
        assert "on node1 and 1 other(s)" in detail
        assert run.checks[("node2", "torch")]["fix"].startswith("install torch==2.")
        assert run.status("node2", "python") == "ok"  # the same Python, another torch

        (
            next(venv_bin.parent.glob("lib/python3*/site-packages")) / "torch" / "__init__.py"
        ).write_text("raise ImportError('this venv has no torch')\n")
        run = preflight(testbed, tmp_path)
    assert run.failed() == {("node2", "torch")}, run
    assert (
        "cannot import torch: ImportError: this venv has no torch"
        in run.checks[("node2", "torch")]["detail"]
    )


def test_an_unreachable_host(clean_testbed: Testbed, tmp_path: Path) -> None:
    clean_testbed.cut_link("node3")
    try:
        run = preflight(clean_testbed, tmp_path)
    finally:
        clean_testbed.restore_link("node3")
    assert run.code == 1, run
    assert run.failed() == {("node3", "reachable")}, run
    assert "ssh HOST true" in run.checks[("node3", "reachable")]["fix"]
    assert {run.status("node3", c) for c in CHECKS[1:]} == {"skip"}
    assert run.status("node1", "rdzv-port") == "ok"


def test_a_full_disk_on_one_host(testbed: Testbed, tmp_path: Path) -> None:
    """A 1 MiB tmpfs over the run dir's parent, in that host's sshd mount namespace only."""
    pid = testbed.ssh.sshd_pid("node2")
    target = testbed.login_home / ".local" / "state" / "ddptui"
    target.mkdir(parents=True, exist_ok=True)
    mount = ["nsenter", "-t", str(pid), "-m", "mount", "-t", "tmpfs", "-o", "size=1m"]
    subprocess.run([*mount, "tmpfs", str(target)], check=True, timeout=30)
    try:
        run = preflight(testbed, tmp_path)
    finally:
        umount = ["nsenter", "-t", str(pid), "-m", "umount", str(target)]
        subprocess.run(umount, check=True, timeout=30)
    assert run.code == 1, run
    assert run.failed() == {("node2", "disk")}, run
    assert run.checks[("node2", "disk")]["detail"].endswith(f"free in {target}")
    assert "at least 1 GiB" in run.checks[("node2", "disk")]["fix"]


def test_text_output_for_a_person(testbed: Testbed, tmp_path: Path) -> None:
    argv = ddptui_argv(testbed, "preflight", "--hosts", "node[1-2]")
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=state_env(tmp_path)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("... gang test: run ") and lines[2] == "... gang test: ok"
    assert lines[3].split() == ["NODE", *CHECKS]
    assert lines[4].split() == ["node1", *(["✓"] * len(CHECKS))]  # the default job's script
    assert lines[-1] == "ready: 2 node(s) ready for PyTorch distributed"
