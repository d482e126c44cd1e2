"""Early sockets: the ssh_config reading they rely on, and claiming over real loopback sockets."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.core.backends.ssh.early_connect import EarlySockets, read_targets

CONFIG = """
# comment
Host gpu* !gpu9
  HostName 10.1.0.%h
  Port 2222
Host gpu9
  HostName=10.1.0.9
Host *
  Port 22
  HostName first-wins-not
  User root
"""


def test_first_value_wins_and_negated_patterns_exclude() -> None:
    targets = read_targets(CONFIG, ["gpu1", "gpu9", "other"])
    assert targets == {
        "gpu1": ("10.1.0.gpu1", 2222),
        "gpu9": ("10.1.0.9", 22),
        "other": ("first-wins-not", 22),
    }


def test_no_config_means_the_host_itself_on_port_22() -> None:
    assert read_targets("", ["node1"]) == {"node1": ("node1", 22)}


@pytest.mark.parametrize(
    "line",
    [
        "ProxyJump bastion",
        "ProxyCommand ssh -W %h:%p bastion",
        "Include ~/.ssh/conf.d/*",
        "Match host x",
        "HostName %h.%d",
    ],
)
def test_anything_it_cannot_follow_gives_no_targets(line: str) -> None:
    assert read_targets(f"Host node1\n  {line}\n", ["node1"]) is None


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield srv
    srv.close()


def _config(tmp_path: Path, port: int, address: str = "127.0.0.1") -> str:
    path = tmp_path / "ssh_config"
    path.write_text(f"Host node1 node2\n  HostName {address}\n  Port {port}\n")
    return str(path)


def test_a_matching_claim_gets_the_connected_socket(
    tmp_path: Path, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    early = EarlySockets.open(["node1"], _config(tmp_path, port))
    assert early.hosts() == ["node1"]

    async def claim() -> socket.socket | None:
        return await early.claim("node1", "127.0.0.1", port, timeout=5)

    sock = asyncio.run(claim())
    assert sock is not None
    peer, _ = listener.accept()
    assert peer.getpeername() == sock.getsockname()  # the very connection it opened
    assert early.hosts() == []  # claimed once
    assert asyncio.run(early.claim("node1", "127.0.0.1", port)) is None
    peer.close()
    sock.close()


def test_a_claim_for_another_place_is_refused_and_closed(
    tmp_path: Path, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    early = EarlySockets.open(["node1", "node2"], _config(tmp_path, port))
    assert asyncio.run(early.claim("node1", "127.0.0.1", port + 1)) is None
    assert asyncio.run(early.claim("node2", "127.0.0.2", port)) is None
    assert early.hosts() == []


def test_a_refused_connect_is_left_to_the_engine(tmp_path: Path) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    early = EarlySockets.open(["node1"], _config(tmp_path, port))
    assert asyncio.run(early.claim("node1", "127.0.0.1", port, timeout=5)) is None


def test_names_are_not_resolved_early(tmp_path: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    early = EarlySockets.open(["node1"], _config(tmp_path, port, address="localhost"))
    assert early.hosts() == []


def test_close_releases_unclaimed_sockets(tmp_path: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    early = EarlySockets.open(["node1", "node2"], _config(tmp_path, port))
    peers = [listener.accept()[0] for _ in range(2)]
    early.close()
    assert early.hosts() == []
    for peer in peers:
        peer.settimeout(5)
        assert peer.recv(1) == b""  # the client side is closed: end of stream
        peer.close()
