"""Settings checked across ranks on real Slurm nodes: the reports come through the step's files."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import SlurmCluster
from tests.integration.slurmrun import run
from tests.integration.sshrun import TRAINER


@pytest.mark.parametrize("launch", ["torchrun", "srun"])
def test_every_rank_reports_its_settings_and_they_agree(
    slurm_cluster: SlurmCluster, tmp_path: Path, launch: str
) -> None:
    result = run(slurm_cluster, tmp_path, "--launch", launch, str(TRAINER / "envcheck.py"))
    assert result.code == 0, (result.summary, result.stderr[-3000:])
    settings = result.of("settings")
    assert settings and settings[0]["complete"] and settings[0]["ranks"] == 4, settings
    assert all(s["differences"] == [] for s in settings), settings
    import torch

    assert settings[0]["common"]["torch"] == torch.__version__, settings[0]
    kinds = {e["kind"] for e in result.of("incident")}
    assert not kinds & {"settings_differ", "known_bad_nccl"}, result.of("incident")
