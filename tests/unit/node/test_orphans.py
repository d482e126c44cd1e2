"""The node helper when the job's command dies alone (its workers orphaned) and when the helper
that waits for it is killed: real processes, the helper run as the console runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ddptui.core.node import job_helper_source, with_job
from tests.procs import pids_with_tag

# A stand-in for a torchrun agent: a worker with a worker's environment, then a long sleep.
AGENT = (
    "import os, subprocess, sys, time\n"
    "env = {**os.environ, 'RANK': '5', 'LOCAL_RANK': '1', 'TORCHELASTIC_RUN_ID': 'r'}\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env=env)\n"
    "print('Done waiting for other agents' if len(sys.argv) > 1 else 'training', flush=True)\n"
    "time.sleep(60)\n"
)


def _start(tmp_path: Path, tag: str, *words: str) -> tuple[int, int, Path]:
    """Start the stand-in agent through the helper's `start`; (agent pid, supervisor pid, log)."""
    log = tmp_path / "runs" / "r" / "nodes" / "n.log"
    job = {"argv": [sys.executable, "-c", AGENT, *words], "env": {}, "tag": tag, "log": str(log)}
    done = subprocess.run(
        [sys.executable, "-", "start"],
        input=with_job(job_helper_source(), job),
        capture_output=True,
        check=True,
        timeout=30,
    )
    agent = json.loads(done.stdout.decode().splitlines()[-1])["pid"]
    said = b"Done waiting for other agents" if words else b"training"
    deadline = time.monotonic() + 20
    # its worker started and its words in the log (its last words: what the tail reads)
    while time.monotonic() < deadline and not (
        len(pids_with_tag(tag)) >= 2 and log.exists() and said in log.read_bytes()
    ):
        time.sleep(0.05)
    supervisor = int(Path(str(log) + ".pid").read_text().split()[1])
    return agent, supervisor, log


def _tail(log: Path, tag: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-", "tail", str(log), "0", tag],
        input=job_helper_source(),
        capture_output=True,
        timeout=60,
    )
    return done.stdout.decode(), done.stderr.decode()


def test_an_agent_killed_alone_has_its_orphaned_worker_stopped_and_told(tmp_path: Path) -> None:
    tag = f"unit-orphan-{os.getpid()}"
    agent, _, log = _start(tmp_path, tag)
    os.kill(agent, signal.SIGKILL)
    out, err = _tail(log, tag)
    assert json.loads(err.strip().splitlines()[-1]) == {"exit": -9}
    assert (
        "[ddptui:5:1]:ddptui: worker ended: exit -15, stopped by the launcher | its torchrun "
        "agent ended (killed by signal 9)"
    ) in out
    assert "stopped 1 orphaned worker(s) (rank 5)" in out
    assert not pids_with_tag(tag)


def test_a_killed_supervisor_leaves_the_exit_to_the_log(tmp_path: Path) -> None:
    """The helper waiting for the job killed, then the job gone: the tail does not wait for
    an exit file forever; the exit is read from the agent's last words (0 after torchrun's
    success line), the job's leftovers stopped."""
    tag = f"unit-supervisor-{os.getpid()}"
    agent, supervisor, log = _start(tmp_path, tag, "succeeded")
    os.kill(supervisor, signal.SIGKILL)
    os.kill(agent, signal.SIGKILL)
    out, err = _tail(log, tag)
    assert json.loads(err.strip().splitlines()[-1]) == {"exit": 0}
    assert "its exit, never recorded, is taken from its log as 0" in out
    assert not pids_with_tag(tag)
