"""The one step's supervisor started ahead: it compiles its program at once, and takes its job
from the rest of stdin when told (ddptui/core/backends/slurm/supervisor.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ddptui.core.backends.slurm import supervisor
from ddptui.core.backends.slurm.supervisor import StepSupervisor
from ddptui.core.node import JOB_LINE, job_helper_source, job_text

PROGRAM = (
    b"import json, base64, sys\n"
    + JOB_LINE
    + b"print(json.loads(base64.b64decode(JOB))['say'], sys.argv[1:])\n"
)


async def test_it_runs_its_verb_once_told_the_job() -> None:
    told = StepSupervisor(sys.executable, PROGRAM, "launch")
    got: list[bytes] = []
    result = await told.run(job_text({"say": "it's told"}), got.append)
    assert result.exit_code == 0, result.stderr
    assert b"".join(got) == b"it's told ['launch']\n"
    told.close()  # told: nothing left to stop


def test_one_never_told_is_stopped() -> None:
    never = StepSupervisor(sys.executable, PROGRAM, "launch")
    never.close()
    assert never._proc.returncode is not None


def test_the_one_started_ahead_is_taken_only_for_the_same_program() -> None:
    supervisor.start_ahead(sys.executable, PROGRAM, "launch")
    ahead = supervisor._ahead
    assert ahead is not None and supervisor.take(sys.executable, PROGRAM, "launch") is ahead
    supervisor.start_ahead(sys.executable, PROGRAM, "launch")
    other = supervisor._ahead
    taken = supervisor.take(sys.executable, PROGRAM + b"\n", "launch")
    assert taken is not other and other is not None and other._proc.returncode is not None
    supervisor.start_ahead(sys.executable, PROGRAM, "launch")
    left = supervisor._ahead
    supervisor.discard()
    assert left is not None and left._proc.returncode is not None
    for one in (ahead, taken):
        one.close()


async def test_the_job_helper_launches_the_job_it_is_told_after_its_program(
    tmp_path: Path,
) -> None:
    helper = StepSupervisor(sys.executable, job_helper_source(), "launch")
    log = tmp_path / "000-node1.log"
    job = {
        "argv": [sys.executable, "-c", "print('ran')"],
        "env": {},
        "cwd": None,
        "prelude": None,
        "tag": f"t{os.getpid()}.0",
        "log": str(log),
    }
    got: list[bytes] = []
    result = await helper.run(job_text(job), got.append)
    assert result.exit_code == 0, result.stderr
    report, _, rest = b"".join(got).partition(b"\n")
    assert json.loads(report)["log"] == str(log) and rest == b"ran\n"
    assert (tmp_path / "000-node1.log.exit").read_text() == "0\n"
