"""GPU telemetry on the Slurm testbed: each node's sampler runs as an `srun --overlap` step
beside the job's (the node's log is not read through the helper there), with a stand-in
`nvidia-smi` on the nodes' PATH (srun exports the console's environment) replaying captures
from 2 x H100: gpu events from both nodes, each rank on its node's GPU, the GPU part of the
teardown proof, and no sampler step left."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.integration.slurmrun import NODES, assert_clean_teardown, job_of, run
from tests.integration.sshrun import TRAINER
from tests.testbed import SlurmCluster

pytestmark = pytest.mark.integration

FAKE_SMI = Path(__file__).parents[1] / "testbed" / "fake_gpu"
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
    assert {e["node"] for e in gpu} == set(NODES)
    for node, ranks in (("node1", [[0], [1]]), ("node2", [[2], [3]])):
        mine = [e for e in gpu if e["node"] == node]
        assert len(mine) >= 3, node
        assert [g["index"] for g in mine[0]["gpus"]] == [0, 1]
        assert mine[0]["gpus"][0]["mem_total_mib"] == 81559
        mapped = [e for e in mine if any(g["ranks"] for g in e["gpus"])]
        assert mapped, f"no sample of {node} mapped a rank to a GPU"
        assert [g["ranks"] for g in mapped[-1]["gpus"]] == ranks
    # one nvidia-smi loop a node for the job, not a process a sample
    calls = (smi / "calls.log").read_text().splitlines()
    assert sum("-lms=300" in c for c in calls) == len(NODES)
    for report in result.of("teardown"):
        proof = report["gpu"]
        assert proof["clean"] and proof["held"] == [], report
        assert proof["mem_before_mib"] == [[0, 1281], [1, 993]]  # the node's first sample
        assert proof["mem_used_mib"] == [[0, 0], [1, 0]]
    assert_clean_teardown(slurm_cluster, result, job_of(result.events))
