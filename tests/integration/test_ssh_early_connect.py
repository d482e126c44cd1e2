"""Early sockets against real sshd: used when the config agrees, set aside when it does not."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ddptui.core.backends.ssh.asyncssh_transport import AsyncsshTransport
from ddptui.core.backends.ssh.early_connect import EarlySockets
from ddptui.core.job.spec import SshSpec
from testbed.netns import Testbed


async def _hostname(transport: AsyncsshTransport) -> str:
    try:
        await transport.connect()
        result = await transport.run(["hostname"], timeout=30)
        return result.stdout.strip()
    finally:
        await transport.close()


def test_the_early_socket_carries_the_session(testbed: Testbed) -> None:
    assert testbed.ssh is not None
    config = str(testbed.ssh.ssh_config)
    with testbed.entered(testbed.head):
        early = EarlySockets.open(["node1"], config)
        opened = early._pending["node1"][0].getsockname()
        transport = AsyncsshTransport("node1", SshSpec(config_file=config))
        transport.offer_early(early)

        async def check() -> tuple[str, object]:
            await transport.connect()
            assert transport._conn is not None
            used = transport._conn.get_extra_info("sockname")
            return await _hostname(transport), used

        name, used = asyncio.run(check())
    assert name == "node1"
    assert tuple(used[:2]) == tuple(opened[:2])  # type: ignore[index]


def test_an_early_socket_to_the_wrong_place_is_not_used(testbed: Testbed, tmp_path: Path) -> None:
    """Early sockets read one config (node1 at node2's address), the engine another."""
    assert testbed.ssh is not None
    wrong = tmp_path / "wrong_config"
    wrong.write_text(f"Host node1\n  HostName {testbed.host_ip('node2')}\n")
    config = str(testbed.ssh.ssh_config)
    with testbed.entered(testbed.head):
        early = EarlySockets.open(["node1"], str(wrong))
        assert early.hosts() == ["node1"]
        transport = AsyncsshTransport("node1", SshSpec(config_file=config))
        transport.offer_early(early)
        name = asyncio.run(_hostname(transport))
    assert name == "node1"
    assert early.hosts() == []
