"""The Slurm backend: finding a run by job id, imports, and choosing the mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddptui.core.job.spec import SpecError
from tests.cases import slurm_spec as _spec


def test_run_for_job_finds_the_run(tmp_path: Path) -> None:
    from ddptui.core.backends.slurm.backend import run_for_job

    for run_id, job in (("20260101-000000-aaaaaa", "41"), ("20260102-000000-bbbbbb", "42")):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "plan.json").write_text(
            json.dumps({"backend": {"backend": "slurm", "job_id": job}})
        )
    found = run_for_job("42", tmp_path)
    assert found is not None and found.run_id == "20260102-000000-bbbbbb"
    assert run_for_job("43", tmp_path) is None


def test_slurm_backend_imports_without_textual_or_pyslurm() -> None:
    code = (
        "import sys\n"
        "import ddptui.core.backends.slurm.backend, ddptui.core.backends.slurm.allocator\n"
        "import ddptui.core.backends.slurm.cli\n"
        "bad = [m for m in sys.modules if m.startswith(('textual', 'ddptui.ui', 'pyslurm'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mode_auto_uses_the_allocation_we_are_inside() -> None:
    from ddptui.core.backends.slurm.commands import resolve_mode

    assert resolve_mode(_spec(), {"SLURM_JOB_ID": "12"}) == "existing"
    assert resolve_mode(_spec(), {}) == "salloc"
    assert resolve_mode(_spec(slurm={"mode": "sbatch"}), {"SLURM_JOB_ID": "12"}) == "sbatch"
    with pytest.raises(SpecError, match="SLURM_JOB_ID is not set"):
        resolve_mode(_spec(slurm={"mode": "existing"}), {})


async def test_the_nodes_followers_share_one_answer_of_squeue(tmp_path: Path) -> None:
    import asyncio

    from ddptui.core.backends.slurm.backend import SlurmBackend
    from ddptui.core.backends.slurm.query import JobInfo
    from ddptui.core.runs.run_dir import RunDir

    backend = SlurmBackend(_spec(), RunDir.create("r", tmp_path), lambda _: None)
    asked: list[str] = []

    async def job(job_id: str) -> JobInfo:
        asked.append(job_id)
        await asyncio.sleep(0.01)
        return JobInfo(job_id, "ddptui-r", ("RUNNING",))

    backend.query.job = job  # type: ignore[method-assign]
    backend.job.job_id = "12"
    # 64 quiet nodes ask whether the job can still end their logs: one squeue for them all
    assert await asyncio.gather(*(backend._ended() for _ in range(64))) == [None] * 64
    assert asked == ["12"]
