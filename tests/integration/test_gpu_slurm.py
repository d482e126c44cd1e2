"""GPU telemetry on the Slurm testbed: each node's sampler runs as an `srun --overlap` step
beside the job's (the node's log is not read through the helper there), with a stand-in
`nvidia-smi` on the nodes' PATH (srun exports the console's environment) replaying captures
from 2 x H100: gpu events from both nodes, each rank on its node's GPU, the GPU part of the
teardown proof, and no sampler step left."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testbed import SlurmCluster
from testbed.gpu_standin import FAKE_SMI, assert_ranks_mapped
from tests.integration.slurmrun import NODES, assert_clean_teardown, job_of, run
from tests.integration.sshrun import TRAINER

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).parents[1] / "data" / "gpu" / "standin"


@pytest.mark.parametrize("launch", ["torchrun", "srun"])
def test_slurm_nodes_send_gpu_samples_with_ranks(
    slurm_cluster: SlurmCluster, tmp_path: Path, launch: str
) -> None:
    """torchrun steps (workers with LOCAL_RANK) and srun direct (the tasks are the workers,
    their ranks SLURM_PROCID / SLURM_LOCALID)."""
    smi = tmp_path / "smi"
    shutil.copytree(CAPTURE, smi)
    result = run(
        slurm_cluster,
        tmp_path,
        "--launch",
        launch,
        "--gpu-sample-ms",
        "300",
        str(TRAINER / "elastic_ddp.py"),
        "--steps",
        "300",
        PATH=f"{FAKE_SMI}:{slurm_cluster.env['PATH']}",
        FAKE_SMI_DIR=str(smi),
        DDPTUI_GPU_SOURCE="smi",
    )
    assert result.code == 0, (result.summary, result.stderr[-3000:])
    gpu = result.of("gpu")
    assert_ranks_mapped(gpu, {"node1": [[0], [1]], "node2": [[2], [3]]})
    # one nvidia-smi loop a node for the job, not a process a sample
    calls = (smi / "calls.log").read_text().splitlines()
    assert sum("-lms=300" in c for c in calls) == len(NODES)
    for report in result.of("teardown"):
        proof = report["gpu"]
        assert proof["clean"] and proof["held"] == [], report
        assert proof["mem_before_mib"] == [[0, 1281], [1, 993]]  # the node's first sample
        assert proof["mem_used_mib"] == [[0, 0], [1, 0]]
    assert_clean_teardown(slurm_cluster, result, job_of(result.events))
