"""The command line's early sockets: which command lines open them, over a real listener,
and that a fresh `ddptui` connects before it imports the job's models or the SSH engine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.cli.early import _flags, open_from_argv
from ddptui.core.backends.ssh import early_connect

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(20)
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def nothing_left_open() -> Iterator[None]:
    yield
    early_connect.discard_preopened()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--headless", "x.py"],  # no hosts
        ["run", "--hosts", "a", "x.py"],  # the console: it connects when the operator launches
        ["run", "--hosts", "a,b", "--profile", "big"],  # the profile may say otherwise
        ["run", "--hostfile", "hosts.txt"],
        ["run", "--hosts", "a", "--backend", "slurm"],
        ["run", "--hosts=a", "--ssh-engine=paramiko"],
        ["preflight", "--hosts", "a"],
        ["run", "--hosts"],  # malformed: argparse says so later
    ],
)
def test_command_lines_it_is_unsure_of_open_nothing(argv: list[str]) -> None:
    assert _flags(argv) is None


def test_last_flag_wins_and_both_spellings_are_read() -> None:
    argv = ["run", "--hosts", "a", "--hosts=n[1-4]", "--ssh-config", "c", "--nodes=2", "--headless"]
    assert _flags(argv) == {"--hosts": "n[1-4]", "--ssh-config": "c", "--nodes": "2"}


def test_opens_the_first_wave_only_for_the_nodes_used(
    listener: socket.socket, tmp_path: Path
) -> None:
    port = listener.getsockname()[1]
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {port}\n")
    argv = ["run", "--headless", "--hosts", "n[1-5]", "--nodes", "4", "--ssh-fanout", "3"]
    open_from_argv([*argv, "--ssh-config", str(config), "x.py"])
    early = early_connect.take_preopened()
    assert early is not None
    assert early.hosts() == ["n1", "n2", "n3"]
    accepted = [listener.accept()[0] for _ in range(3)]
    for conn in accepted:
        conn.close()
    early.close()
    assert early_connect.take_preopened() is None  # taken once


def test_turned_off_by_the_environment(
    listener: socket.socket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDPTUI_EARLY_CONNECT", "0")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {listener.getsockname()[1]}\n")
    open_from_argv(["run", "--headless", "--hosts", "n1", "--ssh-config", str(config), "x.py"])
    assert early_connect.take_preopened() is None


def test_a_fresh_ddptui_connects_before_importing_models_or_engine(
    listener: socket.socket, tmp_path: Path
) -> None:
    """The sockets are opened right after early_connect is imported (the process then
    connects): -X importtime's log up to that module's line names neither pydantic nor
    asyncssh, and the listener sees the connect."""
    port = listener.getsockname()[1]
    config = tmp_path / "ssh_config"
    config.write_text(f"Host node1\n  HostName 127.0.0.1\n  Port {port}\n")
    (tmp_path / "x.py").write_text("")
    log = tmp_path / "imports.txt"
    argv = [sys.executable, "-X", "importtime", "-m", "ddptui.cli", "run", "--headless"]
    argv += ["--hosts", "node1", "--ssh-config", str(config), "--workdir", str(tmp_path), "x.py"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            conn, _ = listener.accept()
            seen = log.read_text()
            conn.close()
        finally:
            proc.kill()
            proc.wait()
    before = seen.split("ddptui.core.backends.ssh.early_connect", 1)[0]
    assert "ddptui.core.backends.ssh.early_connect" in seen
    assert "ddptui.cli.early" in before
    assert "pydantic" not in before and "asyncssh" not in before
