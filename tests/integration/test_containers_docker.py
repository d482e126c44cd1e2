"""`--container-engine docker` on the local backend: Debian's dockerd (started by the tests,
no systemd here) runs each pseudo-node's torchrun; teardown removes the containers and their
containerd shims end, also after the `docker run` clients were killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.containers import Podman, pids_naming
from tests.integration.sshrun import rank_steps
from tests.integration.test_containers_local import TRAINER, _cmd
from tests.procs import outputs, pids_with_tag, until_running

pytestmark = pytest.mark.integration


def argv(docker: Podman, *args: str) -> list[str]:
    return [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--lines",
            "--container-engine", "docker", "--container-image", docker.image, *args]  # fmt: skip


def env(tmp_path: Path, docker: Podman) -> dict[str, str]:
    return {**os.environ, **docker.env, "DDPTUI_STATE_DIR": str(tmp_path / "state")}


def assert_nothing_left(docker: Podman, run_id: str, ids: list[str]) -> None:
    assert docker.containers(f"ddptui-{run_id}") == {}
    assert pids_naming(ids) == []  # the shims: `containerd-shim-runc-v2 ... -id ID`
    assert pids_with_tag(run_id) == []


def test_docker_ranks_green_and_nothing_left(tmp_path: Path, docker: Podman) -> None:
    proc = subprocess.run(
        argv(docker, str(TRAINER / "envcheck.py")),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env(tmp_path, docker),
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = events[-1]
    assert proc.returncode == 0 and summary["ok"], (summary, proc.stderr[-2000:])
    run_id = summary["run_id"]
    for rank, states in rank_steps(events).items():
        assert states[-3:] == ["assigned", "running", "done"], (rank, states)
    plan = next(e for e in events if e["event"] == "plan")
    for index, (_, line) in enumerate(plan["commands"]):
        assert f"docker run --rm --network=host --ipc=host --name ddptui-{run_id}.{index} " in line
    teardown = sorted((e for e in events if e["event"] == "teardown"), key=lambda e: e["node"])
    assert [t["clean"] for t in teardown] == [True, True], teardown
    assert all("removed" in t["detail"] for t in teardown)
    assert_nothing_left(docker, run_id, [])


def test_killed_docker_clients_then_teardown_removes_the_containers(
    tmp_path: Path, docker: Podman
) -> None:
    proc = subprocess.Popen(
        argv(docker, str(TRAINER / "envcheck.py"), "--sleep", "300"),
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env(tmp_path, docker),
    )
    run_id = until_running(proc)
    containers = docker.containers(f"ddptui-{run_id}")
    assert len(containers) == 2
    ids = list(containers.values())
    assert len(pids_naming(ids)) == 2  # one shim each
    clients = [p for p in pids_with_tag(run_id) if _cmd(p).startswith("docker run ")]
    assert len(clients) == 2
    proc.kill()
    outputs(proc, 30)
    for pid in clients:
        os.kill(pid, signal.SIGKILL)
    time.sleep(2.0)
    assert sorted(docker.containers(f"ddptui-{run_id}")) == sorted(containers)  # still there
    attach = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "attach", run_id, "--headless"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=env(tmp_path, docker),
    )
    events = [json.loads(line) for line in attach.stdout.splitlines() if line.startswith("{")]
    teardown = sorted((e for e in events if e["event"] == "teardown"), key=lambda e: e["node"])
    assert [t["clean"] for t in teardown] == [True, True], (teardown, attach.stderr[-2000:])
    for index, t in enumerate(teardown):
        assert (
            f"container ddptui-{run_id}.{index} removed, its conmon/shim (1) gone" in (t["detail"])
        )
    assert_nothing_left(docker, run_id, ids)


def test_daemon_named_only_by_the_jobs_env_is_the_one_teardown_asks(
    tmp_path: Path, docker: Podman
) -> None:
    """DOCKER_HOST given to the job alone (`--env`), not to the console or the node helper's
    session: the containers run on that daemon, and teardown asks that same daemon (as the
    job's `docker run` client has it) to remove them."""
    console_env = {k: v for k, v in env(tmp_path, docker).items() if k != "DOCKER_HOST"}
    proc = subprocess.Popen(
        argv(docker, "--env", f"DOCKER_HOST={docker.env['DOCKER_HOST']}",
             str(TRAINER / "envcheck.py"), "--sleep", "300"),
        stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=console_env,
    )  # fmt: skip
    run_id = until_running(proc)
    containers = docker.containers(f"ddptui-{run_id}")
    assert len(containers) == 2
    proc.send_signal(signal.SIGTERM)
    out, _ = outputs(proc, 120)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    teardown = sorted((e for e in events if e["event"] == "teardown"), key=lambda e: e["node"])
    assert [t["clean"] for t in teardown] == [True, True], teardown
    for index, t in enumerate(teardown):
        assert f"container ddptui-{run_id}.{index} removed, its conmon/shim (1) gone" in t["detail"]
    assert_nothing_left(docker, run_id, list(containers.values()))
