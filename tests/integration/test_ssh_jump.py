"""SSH through a jump host: a testbed whose head namespace (where the console runs) reaches
the nodes only through a bastion host, with ProxyJump (asyncssh, paramiko) or ProxyCommand
(`ssh -W %h:%p bastion`, paramiko) in the operator's ssh_config."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.netns import Testbed
from tests.integration.sshrun import TRAINER, all_running, popen_headless, run_headless
from tests.procs import outputs

pytestmark = pytest.mark.integration

NODES = ["node1", "node2"]


@pytest.fixture
def bastion(make_testbed: Callable[..., Testbed]) -> Testbed:
    """bastion, node1, node2 on one bridge; the head's routes to the nodes are `prohibit`,
    so every packet from the console to a node goes through the bastion's sshd."""
    tb = make_testbed(["bastion", *NODES], sshd=True)
    for node in NODES:
        tb.run("head", ["ip", "route", "add", "prohibit", f"{tb.host_ip(node)}/32"])
    return tb


def jump_config(tb: Testbed, how: str) -> Path:
    """The testbed's client config with the nodes behind the bastion."""
    assert tb.ssh is not None
    plain = tb.ssh.ssh_config
    if how == "ProxyJump":
        hop = "ProxyJump bastion"
    else:
        hop = f"ProxyCommand ssh -F {plain} -W %h:%p bastion"
    text = plain.read_text()
    for node in NODES:
        entry = f"Host {node}\n  HostName {tb.host_ip(node)}\n"
        assert entry in text
        text = text.replace(entry, f"{entry}  {hop}\n")
    path = plain.with_suffix(f".{how}")
    path.write_text(text)
    return path


def nodes_idle(tb: Testbed) -> dict[str, list[str]]:
    left = {n: [p for p in tb.describe_pids(n) if "sshd" not in p] for n in NODES}
    return {n: p for n, p in left.items() if p}


def test_the_nodes_are_reachable_only_through_the_bastion(bastion: Testbed) -> None:
    assert bastion.ssh is not None
    direct = subprocess.run(
        bastion.ns_argv("head", bastion.ssh.ssh_argv("node1", "true")),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert direct.returncode != 0
    jumped = subprocess.run(
        bastion.ns_argv(
            "head", ["ssh", "-F", str(jump_config(bastion, "ProxyJump")), "node1", "hostname"]
        ),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert jumped.returncode == 0 and jumped.stdout.strip() == "node1", jumped.stderr


@pytest.mark.parametrize(
    ("engine", "how"),
    [("asyncssh", "ProxyJump"), ("paramiko", "ProxyCommand"), ("paramiko", "ProxyJump")],
)
def test_job_through_the_bastion_green_then_clean(
    bastion: Testbed, tmp_path: Path, engine: str, how: str
) -> None:
    run = run_headless(
        bastion,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--ssh-engine",
        engine,
        "--lines",
        str(TRAINER / "envcheck.py"),
        ssh_config=jump_config(bastion, how),
    )
    summary = run.summary
    assert run.code == 0, (summary, run.stderr[-2000:])
    assert [r["state"] for r in summary["ranks"]] == ["done"] * 4
    hosts = {(e["node"], e["text"].split()[1]) for e in run.of("line") if "host=" in e["text"]}
    assert hosts == {("node1", "host=node1"), ("node2", "host=node2")}
    plan = run.of("plan")[0]
    for node, line in plan["commands"]:
        assert f"--local-addr={bastion.host_ip(node)}" in line, line  # the node's own address
    assert all(t["clean"] for t in run.of("teardown"))
    assert not nodes_idle(bastion)


def test_teardown_through_the_bastion_mid_run(bastion: Testbed, tmp_path: Path) -> None:
    proc = popen_headless(bastion, tmp_path / "state", "--hosts", "node[1-2]", "--ssh-config",
                          str(jump_config(bastion, "ProxyJump")), str(TRAINER / "envcheck.py"),
                          "--sleep", "300")  # fmt: skip
    all_running(proc)
    assert nodes_idle(bastion)  # the job runs on the nodes
    proc.send_signal(signal.SIGTERM)
    out, _ = outputs(proc, 120)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    teardown = [e for e in events if e["event"] == "teardown"]
    assert sorted(t["node"] for t in teardown) == NODES
    assert all(t["clean"] for t in teardown), teardown
    assert not nodes_idle(bastion)
