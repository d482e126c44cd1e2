"""The SSH backend with `--container-image`: on each testbed host (its own network
namespace and sshd) torchrun runs in a real podman container with `--network=host`, and
teardown leaves no container, conmon or process of the job in any host."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from testbed.containers import Podman, pids_naming
from testbed.netns import Testbed
from tests.integration.sshrun import (
    TRAINER,
    all_running,
    popen_headless,
    rank_steps,
    run_headless,
)
from tests.procs import outputs, pids_with_tag

pytestmark = pytest.mark.integration

HOSTS = ["node1", "node2"]


def assert_nothing_left(tb: Testbed, podman: Podman, run_id: str) -> None:
    assert podman.containers(f"ddptui-{run_id}") == {}
    assert pids_naming([f"ddptui-{run_id}.0", f"ddptui-{run_id}.1"]) == []  # conmon -n NAME
    assert pids_with_tag(run_id) == []
    assert not tb.wait_clean(HOSTS)  # nothing but sshd in either host


def check_teardown(events: list[dict], run_id: str) -> None:
    teardown = sorted((e for e in events if e["event"] == "teardown"), key=lambda e: e["node"])
    assert [t["node"] for t in teardown] == HOSTS
    assert all(t["clean"] for t in teardown), teardown
    for index, t in enumerate(teardown):
        assert f"container ddptui-{run_id}.{index} removed" in t["detail"], t


@pytest.mark.parametrize(
    ("engine", "script", "args", "expect"),
    [
        ("asyncssh", "envcheck.py", [], "allreduce=ok"),
        ("paramiko", "elastic_ddp.py", ["--steps", "3"], "Start running basic DDP example"),
    ],
)
def test_hosts_run_the_trainer_in_containers(
    testbed: Testbed,
    podman: Podman,
    tmp_path: Path,
    engine: str,
    script: str,
    args: list[str],
    expect: str,
) -> None:
    run = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--ssh-engine",
        engine,
        "--container-image",
        podman.image,
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
    said = {(e["node"], e["rank"]) for e in run.of("line") if expect in e["text"]}
    assert said == {("node1", 0), ("node1", 1), ("node2", 2), ("node2", 3)}
    plan = run.of("plan")[0]
    for index, (node, line) in enumerate(plan["commands"]):
        assert node == HOSTS[index]
        assert (
            f"podman run --rm --network=host --ipc=host --name ddptui-{run_id}.{index} -v "
            f"{TRAINER}:{TRAINER}:ro " in line
        ), line
        address = testbed.host_ip(node)
        assert f" {podman.image} torchrun --nnodes=2 " in line
        assert f"--local-addr={address}" in line
    check_teardown(run.events, run_id)
    assert_nothing_left(testbed, podman, run_id)


def test_teardown_mid_run_removes_every_container(
    testbed: Testbed, podman: Podman, tmp_path: Path
) -> None:
    proc = popen_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--container-image",
        podman.image,
        str(TRAINER / "envcheck.py"),
        "--sleep",
        "300",
    )
    events = all_running(proc)
    run_id = next(e for e in events if e["event"] == "plan")["run_id"]
    containers = podman.containers(f"ddptui-{run_id}")
    assert sorted(containers) == [f"ddptui-{run_id}.0", f"ddptui-{run_id}.1"]
    assert len(pids_naming(containers.values())) == 2
    proc.send_signal(signal.SIGTERM)
    out, _ = outputs(proc, 120)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    check_teardown(events, run_id)
    assert pids_naming(containers.values()) == []
    assert_nothing_left(testbed, podman, run_id)
