"""The rendezvous port is free where it is used: held on the rendezvous host by another
process (a real listening socket in that host's network namespace, or on this machine), the
port is picked again (the default) or refused naming who holds it (a port the operator gave).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import SlurmCluster
from testbed.netns import Testbed
from tests.cases import TRAINER
from tests.integration.slurmrun import run as slurm_run
from tests.integration.sshrun import run_headless

pytestmark = pytest.mark.integration

HOLD = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen()\n"
    "print('listening', flush=True); time.sleep(600)\n"
)


@contextlib.contextmanager
def held(argv_in: list[str], port: int) -> Iterator[subprocess.Popen[str]]:
    """A process listening on `port` (argv_in: how to run python where the port is)."""
    squatter = subprocess.Popen(
        [*argv_in, "-c", HOLD, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert squatter.stdout is not None
        assert squatter.stdout.readline().strip() == "listening"
        yield squatter
    finally:
        squatter.kill()
        squatter.wait(30)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_local_an_explicit_rdzv_port_that_is_taken_is_refused_naming_its_holder(
    tmp_path: Path,
) -> None:
    port = _free_port()
    env = {**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state"), "PATH": os.environ["PATH"]}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    with held([sys.executable], port) as squatter:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--rdzv-port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env,
        )
        took = time.monotonic() - started
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = events[-1]
    assert proc.returncode != 0 and summary["event"] == "summary", proc.stderr
    user = "root" if os.getuid() == 0 else str(os.getuid())
    said = f"port {port} on local0 is in use by PID {squatter.pid} (user {user}, {sys.executable}"
    first = summary["detail"].splitlines()[0]  # the story's lead: the refusal, its cause
    assert first.startswith(f"refused before launch — {said}"), summary["detail"]
    assert summary["headline"] == first
    assert "choose another with --rdzv-port" in summary["detail"]
    assert not any(e["event"] == "plan" for e in events)  # nothing was started
    assert took < 60


def _squatter_in(tb: Testbed, host: str) -> list[str]:
    return tb.ns_argv(host, [sys.executable])


def test_ssh_the_default_port_held_on_the_first_host_is_picked_again(
    clean_testbed: Testbed, tmp_path: Path
) -> None:
    tb = clean_testbed
    with held(_squatter_in(tb, "node1"), 29400) as squatter:
        run = run_headless(
            tb,
            tmp_path / "state",
            "--hosts",
            "node[1-2]",
            "--nproc-per-node",
            "1",
            str(TRAINER / "envcheck.py"),
        )
        assert squatter.poll() is None  # untouched
    assert run.code == 0, run.summary
    notices = [e["message"] for e in run.of("notice")]
    picked = [n for n in notices if n.startswith("port 29400 on node1 is in use by PID ")]
    assert picked, notices
    assert "(user root, " in picked[0] and "the rendezvous uses port " in picked[0]
    port = int(picked[0].rsplit("port ", 1)[1].split()[0])
    [plan] = run.of("plan")
    assert plan["rdzv_endpoint"].endswith(f":{port}") and port != 29400
    assert all(e["clean"] for e in run.of("teardown"))


# A port the operator gave, held on the first host: test_ssh_backend.py
# (test_rendezvous_port_taken_on_first_host), refused naming its holder.


def test_slurm_the_port_held_on_the_first_node_is_refused_naming_its_holder(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    with held(_squatter_in(slurm_cluster.tb, "node1"), 29400) as squatter:
        script = str(TRAINER / "envcheck.py")
        run = slurm_run(slurm_cluster, tmp_path, "--nproc-per-node", "1", script)
    assert run.code != 0
    detail = run.summary["detail"]
    said = f"rendezvous port 29400 on node1 is not available (in use by PID {squatter.pid} "
    assert detail.startswith(f"refused before launch — {said}"), detail  # the story's lead
    assert "(user root, " in detail and "--rdzv-port" in detail
