"""The node helper's `kill_rank` (fault injection), run as the console runs it: it kills the
job's worker of one local rank and nothing else of the job (never the agent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ddptui.core.node import job_helper_source
from ddptui.core.node.job_helper import TAG_VAR

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _started(tag: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(SLEEP, env={**os.environ, TAG_VAR: tag, **env})


def test_kill_rank_kills_that_worker_only() -> None:
    tag = f"killrank-{os.getpid()}"
    agent = _started(tag)  # the agent carries the tag, not LOCAL_RANK
    worker0 = _started(tag, LOCAL_RANK="0", TORCHELASTIC_RUN_ID="r")
    worker1 = _started(tag, LOCAL_RANK="1", TORCHELASTIC_RUN_ID="r")
    other_job = _started(tag + "x", LOCAL_RANK="1", TORCHELASTIC_RUN_ID="r")
    try:
        time.sleep(0.3)  # their environments are readable once they run
        done = subprocess.run(
            [sys.executable, "-", "kill_rank", tag, "1"],
            input=job_helper_source(),
            capture_output=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.decode().splitlines()[-1]) == {"killed": [worker1.pid]}
        assert worker1.wait(timeout=10) == -9
        assert all(p.poll() is None for p in (agent, worker0, other_job))
        again = subprocess.run(
            [sys.executable, "-", "kill_rank", tag, "1"],
            input=job_helper_source(),
            capture_output=True,
            timeout=30,
        )
        assert again.returncode == 1  # nothing of that rank runs any more
    finally:
        for proc in (agent, worker0, worker1, other_job):
            proc.kill()
            proc.wait()
