"""The one step's supervisor started ahead: it compiles its program at once, and takes its job
from the rest of stdin when told (ddptui/core/backends/slurm/supervisor.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ddptui.core.backends.slurm.supervisor import StepSupervisor
from ddptui.core.node import JOB_LINE, job_helper_source, job_text

PROGRAM = (
    b"import json, base64, sys\n"
    + JOB_LINE
    + b"print(json.loads(base64.b64decode(JOB))['say'], sys.argv[1:])\n"
)


async def test_it_runs_its_verb_once_told_the_job() -> None:
    supervisor = await StepSupervisor.start(sys.executable, PROGRAM, "launch")
    got: list[bytes] = []
    result = await supervisor.run(job_text({"say": "it's told"}), got.append)
    assert result.exit_code == 0, result.stderr
    assert b"".join(got) == b"it's told ['launch']\n"
    await supervisor.close()  # told: nothing left to stop


async def test_one_never_told_is_stopped() -> None:
    supervisor = await StepSupervisor.start(sys.executable, PROGRAM, "launch")
    await supervisor.close()
    assert supervisor._proc.returncode is not None


async def test_the_job_helper_launches_the_job_it_is_told_after_its_program(
    tmp_path: Path,
) -> None:
    supervisor = await StepSupervisor.start(sys.executable, job_helper_source(), "launch")
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
    result = await supervisor.run(job_text(job), got.append)
    assert result.exit_code == 0, result.stderr
    report, _, rest = b"".join(got).partition(b"\n")
    assert json.loads(report)["log"] == str(log) and rest == b"ran\n"
    assert (tmp_path / "000-node1.log.exit").read_text() == "0\n"
