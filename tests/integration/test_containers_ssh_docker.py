"""The SSH backend with `--container-engine docker`: each testbed host runs its own dockerd
inside its own namespaces (a `--network=host` container joins the daemon's network namespace,
not the SSH session's), its sshd points every session's DOCKER_HOST at it, and torchrun runs
in a real docker container there. Teardown goes through the same per-host daemon and leaves
no container, shim or process of the job in any host."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from testbed.containers import Podman
from testbed.dockerd import shims
from testbed.netns import Testbed
from tests.integration.sshrun import (
    TRAINER,
    all_running,
    popen_headless,
    rank_steps,
    run_headless,
)
from tests.integration.test_containers_ssh import HOSTS, check_teardown
from tests.procs import outputs, pids_with_tag

pytestmark = pytest.mark.integration


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _netns(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def assert_nothing_left(tb: Testbed, dockers: dict[str, Podman], run_id: str) -> None:
    """No container of the run in either host's daemon, no shim of either daemon, no process
    carrying the run's tag (those inside the containers included), nothing but sshd and the
    daemons in either host."""
    for host in HOSTS:
        assert dockers[host].containers(f"ddptui-{run_id}") == {}, host
        assert shims(dockers[host].root) == [], host
    assert pids_with_tag(run_id) == []
    assert not tb.wait_clean(HOSTS)


@pytest.mark.parametrize(
    ("engine", "script", "args", "expect"),
    [
        ("asyncssh", "envcheck.py", [], re.compile(r"^envcheck rank=(\d) allreduce=ok")),
        ("paramiko", "elastic_ddp.py", ["--steps", "3"], re.compile(r"^rank (\d) finished$")),
    ],
)
def test_hosts_run_the_trainer_in_docker_containers(
    testbed: Testbed,
    host_dockers: dict[str, Podman],
    tmp_path: Path,
    engine: str,
    script: str,
    args: list[str],
    expect: re.Pattern[str],
) -> None:
    image = host_dockers["node1"].image
    run = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--ssh-engine",
        engine,
        "--container-engine",
        "docker",
        "--container-image",
        image,
        "--lines",
        str(TRAINER / script),
        *args,
        timeout=300,
    )
    summary = run.summary
    assert run.code == 0, (summary, run.stderr[-2000:])
    run_id = summary["run_id"]
    assert [r["state"] for r in summary["ranks"]] == ["done"] * 4
    for rank, states in rank_steps(run.events).items():
        assert states[-3:] == ["assigned", "running", "done"], (rank, states)
    said = {}
    for e in run.of("line"):
        if m := expect.match(e["text"]):
            said[int(m[1])] = (e["node"], e["rank"])
    assert said == {r: (HOSTS[r // 2], r) for r in range(4)}
    if script == "envcheck.py":  # the container's hostname is its host's: its daemon's
        hosts = {e["rank"]: e["text"].split()[1] for e in run.of("line") if " host=" in e["text"]}
        assert hosts == {r: f"host={HOSTS[r // 2]}" for r in range(4)}
    plan = run.of("plan")[0]
    for index, (node, line) in enumerate(plan["commands"]):
        assert node == HOSTS[index]
        assert (
            f"docker run --rm --network=host --ipc=host --name ddptui-{run_id}.{index} -v "
            f"{TRAINER}:{TRAINER}:ro " in line
        ), line
        assert f" {image} torchrun --nnodes=2 " in line
        assert f"--local-addr={testbed.host_ip(node)}" in line
    check_teardown(run.events, run_id)
    assert_nothing_left(testbed, host_dockers, run_id)


def test_killed_docker_clients_then_teardown_removes_each_hosts_container(
    testbed: Testbed, host_dockers: dict[str, Podman], tmp_path: Path
) -> None:
    """Each node's container lives in its own host's daemon, with its workers in that host's
    network namespace. With the `docker run` clients killed (the shims keep the containers
    and their training), the console's teardown still stops the processes inside (seen from
    the host), removes each container through its host's daemon (the node helper reaches
    it through the session's DOCKER_HOST), and each shim ends."""
    proc = popen_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--container-engine",
        "docker",
        "--container-image",
        host_dockers["node1"].image,
        str(TRAINER / "envcheck.py"),
        "--sleep",
        "300",
    )
    events = all_running(proc)
    run_id = next(e for e in events if e["event"] == "plan")["run_id"]
    for index, host in enumerate(HOSTS):
        assert list(host_dockers[host].containers(f"ddptui-{run_id}")) == [
            f"ddptui-{run_id}.{index}"
        ]
        assert len(shims(host_dockers[host].root)) == 1
    inside = [p for p in pids_with_tag(run_id) if _cmd(p).startswith("/usr/bin/python3 -u ")]
    assert len(inside) == 4  # the workers, in the containers, seen from the host
    by_host = {h: os.stat(testbed.ns_path(h)).st_ino for h in HOSTS}
    assert sorted(_netns(p) for p in inside) == sorted(
        [by_host["node1"]] * 2 + [by_host["node2"]] * 2
    )
    clients = [p for p in pids_with_tag(run_id) if _cmd(p).startswith("docker run ")]
    assert len(clients) == 2
    for pid in clients:
        os.kill(pid, signal.SIGKILL)
    proc.send_signal(signal.SIGTERM)
    out, _ = outputs(proc, 120)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    check_teardown(events, run_id)
    for t in events:
        if t["event"] == "teardown":
            assert "its conmon/shim (1) gone" in t["detail"], t
    assert_nothing_left(testbed, host_dockers, run_id)
