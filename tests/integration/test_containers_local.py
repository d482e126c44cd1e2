"""The local backend with `--container-image`: every pseudo-node's torchrun runs in a real
podman container (`podman run --network=host --ipc=host ...`) from the test image, and
teardown leaves no container, no conmon and no process of the job, inside or outside."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.containers import Podman, pids_naming
from tests.integration.sshrun import rank_steps
from tests.procs import outputs, pids_with_tag, until_running

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRAINER = ROOT / "trainer"


def headless_argv(image: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ddptui.cli",
        "run",
        "--headless",
        "--lines",
        "--container-image",
        image,
        *args,
    ]


def env(tmp_path: Path, podman: Podman) -> dict[str, str]:
    return {**os.environ, **podman.env, "DDPTUI_STATE_DIR": str(tmp_path / "state")}


def assert_nothing_left(podman: Podman, run_id: str) -> None:
    """No container of the run in podman's store, no process naming one (conmon has
    `-n NAME`), and no process carrying the run's tag (the container's own included)."""
    assert podman.containers(f"ddptui-{run_id}") == {}
    assert pids_naming([f"ddptui-{run_id}.0", f"ddptui-{run_id}.1"]) == []
    assert pids_with_tag(run_id) == []


def check_podman_lines(events: list[dict], run_id: str) -> None:
    """The plan shows the exact `podman run ...` each node runs, as commands.sh does."""
    plan = next(e for e in events if e["event"] == "plan")
    for index, (node, line) in enumerate(plan["commands"]):
        assert node == f"local{index}"
        start = line.index("podman run ")
        assert line[start:].startswith(
            f"podman run --rm --network=host --ipc=host --name ddptui-{run_id}.{index} "
            f"--hostname local{index} --add-host local{index}:127.0.0.{index + 2} "
        ), line
        assert "-e DDPTUI_TAG" in line and " torchrun --nnodes=2 " in line


@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        ("envcheck.py", [], re.compile(r"^envcheck rank=(\d) allreduce=ok")),
        ("elastic_ddp.py", ["--steps", "3"], re.compile(r"^rank (\d) finished$")),
    ],
)
def test_ranks_green_in_containers_and_nothing_left(
    tmp_path: Path, podman: Podman, script: str, args: list[str], expect: re.Pattern[str]
) -> None:
    proc = subprocess.run(
        headless_argv(podman.image, str(TRAINER / script), *args),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env(tmp_path, podman),
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = events[-1]
    assert summary["event"] == "summary", proc.stderr[-2000:]
    assert proc.returncode == 0 and summary["ok"], summary
    run_id = summary["run_id"]
    assert [r["state"] for r in summary["ranks"]] == ["done"] * 4
    for rank, states in rank_steps(events).items():
        assert states[-3:] == ["assigned", "running", "done"], (rank, states)
    # Logs attributed: every rank's line came from its own node (ranks 0-1 on local0).
    said = {}
    for e in events:
        if e["event"] == "line" and (m := expect.match(e["text"])):
            said[int(m[1])] = (e["node"], e["rank"])
    assert said == {r: (f"local{r // 2}", r) for r in range(4)}
    check_podman_lines(events, run_id)
    assert (
        "podman run --rm --network=host --ipc=host"
        in (Path(summary["run_dir"]) / "commands.sh").read_text()
    )
    teardown = sorted((e for e in events if e["event"] == "teardown"), key=lambda e: e["node"])
    assert [t["clean"] for t in teardown] == [True, True], teardown
    for index, t in enumerate(teardown):
        assert f"container ddptui-{run_id}.{index} removed" in t["detail"], t
    assert_nothing_left(podman, run_id)


def test_killed_podman_client_leaves_the_container_to_conmon_and_teardown_ends_it(
    tmp_path: Path, podman: Podman
) -> None:
    """A console killed with its `podman run` clients (SIGKILL: what a dying head node or
    SSH session does) leaves each container running under conmon. `ddptui attach` then sees
    the nodes' clients gone, and its teardown stops the processes inside the containers
    (seen from the host), removes the containers, and their conmon ends."""
    proc = subprocess.Popen(
        headless_argv(podman.image, str(TRAINER / "envcheck.py"), "--sleep", "300"),
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env(tmp_path, podman),
    )
    run_id = until_running(proc)
    containers = podman.containers(f"ddptui-{run_id}")
    assert sorted(containers) == [f"ddptui-{run_id}.0", f"ddptui-{run_id}.1"]
    assert len(pids_naming(containers.values())) == 2  # one conmon each
    clients = [p for p in pids_with_tag(run_id) if _cmd(p).startswith("podman run ")]
    assert len(clients) == 2
    inside = [p for p in pids_with_tag(run_id) if _cmd(p).startswith("/usr/bin/python3 -u ")]
    assert len(inside) == 4  # the workers, in the containers, seen from the host
    proc.kill()
    outputs(proc, 30)
    for pid in clients:
        os.kill(pid, signal.SIGKILL)
    time.sleep(2.0)
    assert sorted(podman.containers(f"ddptui-{run_id}")) == sorted(containers)
    assert all(p in pids_with_tag(run_id) for p in inside)  # still training under conmon
    attach = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "attach", run_id, "--headless"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=env(tmp_path, podman),
    )
    events = [json.loads(line) for line in attach.stdout.splitlines() if line.startswith("{")]
    teardown = sorted((e for e in events if e["event"] == "teardown"), key=lambda e: e["node"])
    assert [t["clean"] for t in teardown] == [True, True], (teardown, attach.stderr[-2000:])
    for index, t in enumerate(teardown):
        assert (
            f"container ddptui-{run_id}.{index} removed, its conmon/shim (1) gone" in (t["detail"])
        )
        assert int(t["detail"].split()[0]) == 3, t  # torchrun and its 2 workers, inside
    assert pids_naming(containers.values()) == []
    assert_nothing_left(podman, run_id)


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
