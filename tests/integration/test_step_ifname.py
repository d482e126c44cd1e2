"""The Slurm step's task names the interface holding its node's address (GLOO/NCCL_SOCKET_IFNAME)
in a real network namespace, entered as the testbed's slurmd are (nsenter: this machine's
/sys stays, only /proc/net is the namespace's): a node with one interface besides lo needs
no `ip`; one with more asks `ip` which holds the address."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from testbed import Testbed
from testbed.netns import IFNAME
from tests.cases import step_task

SHOW = 'import os; print("ifname=" + str(os.environ.get("GLOO_SOCKET_IFNAME")))'


def test_one_interface_is_taken_without_ip_and_more_are_asked(
    testbed: Testbed, tmp_path: Path
) -> None:
    host = testbed.hosts[0]
    ns = testbed.ns(host)
    ip = shutil.which("ip")
    assert ip is not None
    asked = tmp_path / "ip-asked"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ip").write_text(f'#!/bin/sh\ntouch {asked}\nexec {ip} "$@"\n')
    (fake / "ip").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/sbin:/usr/bin:/sbin:/bin"}

    def task() -> str:
        done = step_task(
            "node1",
            [sys.executable, "-c", SHOW],
            prefix=["nsenter", f"--net={testbed.ns_path(host)}"],
            env=env,
            ifname_for=testbed.host_ip(host),
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()

    assert f"\nifname={IFNAME}\n" in task() and not asked.exists()
    pair = ["ddptuiv0", "type", "veth", "peer", "name", "ddptuiv1"]  # two more interfaces
    subprocess.run([ip, "-n", ns, "link", "add", *pair], check=True)
    try:
        assert f"\nifname={IFNAME}\n" in task() and asked.exists()
    finally:
        subprocess.run([ip, "-n", ns, "link", "del", "ddptuiv0"], check=True)
