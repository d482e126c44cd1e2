"""sbatch jobs on the Slurm testbed as on a busy cluster: each node is proven clean by the
job's own last step inside its allocation (never by a new job, which could wait for hours or
never land on a drained node), and the teardown says how the job ended. Also: torchrun in
podman containers from the batch script, and cifar10_vgg.py launched by srun alone."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from testbed.containers import Podman, pids_naming
from testbed.slurm import SlurmCluster
from tests.integration.slurmrun import (
    NODES,
    assert_clean_teardown,
    finish,
    job_of,
    run,
    start,
)
from tests.integration.sshrun import TRAINER, all_running
from tests.procs import pids_with_tag

pytestmark = pytest.mark.integration


def no_job_after(cluster: SlurmCluster, job_id: str) -> None:
    """The proof used no job of its own: Slurm has given out no job id after ours."""
    out = cluster.run(["scontrol", "show", "job", str(int(job_id) + 1)], check=False)
    assert "Invalid job id" in (out.stdout + out.stderr), out.stdout


def proofs(result: Any) -> list[dict[str, Any]]:
    return sorted(result.of("teardown"), key=lambda e: e["node"])


def test_finished_job_says_so_and_its_last_step_proved_each_node(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    result = run(slurm_cluster, tmp_path, "--slurm-mode", "sbatch", str(TRAINER / "envcheck.py"))
    assert result.code == 0, (result.events[-3:], result.stderr[-2000:])
    job_id = job_of(result.events)
    for report, node in zip(proofs(result), NODES, strict=True):
        assert report["detail"].startswith(
            f"job {job_id} finished by itself (COMPLETED, exit 0); "
            f"its last step checked {node}; no process of the job left on {node}"
        ), report
    assert not any("scancel" in r["detail"] for r in proofs(result))
    run_dir = Path(result.summary["run_dir"])
    assert sorted(p.name for p in (run_dir / "nodes").glob("*.proof")) == [
        "000-node1.proof",
        "001-node2.proof",
    ]
    assert_clean_teardown(slurm_cluster, result, job_id)
    no_job_after(slurm_cluster, job_id)


def test_teardown_on_drained_nodes_is_proven_inside_the_allocation(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Nodes drained under a running job take no new job; the proof needs none."""
    proc = start(
        slurm_cluster,
        tmp_path,
        "--slurm-mode",
        "sbatch",
        str(TRAINER / "envcheck.py"),
        "--sleep",
        "300",
    )
    job_id = job_of(all_running(proc))
    slurm_cluster.run(
        ["scontrol", "update", f"NodeName={','.join(NODES)}", "State=DRAIN", "Reason=ddptui-test"]
    )
    try:
        result = finish(proc)
        states = slurm_cluster.run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout
    finally:
        slurm_cluster.run(["scontrol", "update", f"NodeName={','.join(NODES)}", "State=RESUME"])
    assert re.search(r"node1 drain", states), states
    for report, node in zip(proofs(result), NODES, strict=True):
        assert report["clean"], report
        assert report["detail"].startswith(
            f"job {job_id} ended after ddptui stopped its training step ("
        ), report
        assert f"its last step checked {node}" in report["detail"]
    assert_clean_teardown(slurm_cluster, result, job_id)
    no_job_after(slurm_cluster, job_id)


def test_sbatch_runs_torchrun_in_podman_on_each_node(
    slurm_cluster: SlurmCluster, podman: Podman, tmp_path: Path
) -> None:
    proc = start(
        slurm_cluster,
        tmp_path,
        "--slurm-mode",
        "sbatch",
        "--container-image",
        podman.image,
        str(TRAINER / "envcheck.py"),
        "--sleep",
        "300",
        **podman.env,
    )
    seen = all_running(proc)
    job_id = job_of(seen)
    script = next(
        e["message"] for e in seen if e["event"] == "notice" and "#SBATCH" in e["message"]
    )
    run_id = next(e["run_id"] for e in seen if e["event"] == "plan")
    assert (
        f"podman run --rm --network=host --ipc=host --name ddptui-{run_id}.${{SLURM_NODEID}} "
        in script
    )
    containers = podman.containers(f"ddptui-{run_id}")
    assert sorted(containers) == [f"ddptui-{run_id}.0", f"ddptui-{run_id}.1"]
    result = finish(proc)
    for index, report in enumerate(proofs(result)):
        assert report["clean"], report
        assert f"container ddptui-{run_id}.{index} removed" in report["detail"], report
    assert_clean_teardown(slurm_cluster, result, job_id)
    assert podman.containers(f"ddptui-{run_id}") == {}
    assert pids_naming(containers.values()) == []
    assert pids_with_tag(run_id) == []


def test_cifar10_vgg_launched_by_srun_alone(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """The cifar10-vgg procedure: one task per process, ranks from SLURM_PROCID."""
    result = run(
        slurm_cluster,
        tmp_path,
        "--launch",
        "srun",
        "--lines",
        str(TRAINER / "cifar10_vgg.py"),
        "--launch",
        "srun",
        "--samples",
        "64",
        "--batch-size",
        "16",
    )
    assert result.code == 0, (result.events[-3:], result.stderr[-2000:])
    assert [r["state"] for r in result.summary["ranks"]] == ["done"] * 4
    epochs = {
        (e["node"], e["rank"])
        for e in result.of("line")
        if re.match(r"rank \d epoch=1/1 loss=", e["text"])
    }
    assert epochs == {("node1", 0), ("node1", 1), ("node2", 2), ("node2", 3)}
    first = next(e["text"] for e in result.of("line") if e["text"].startswith("cifar10-vgg "))
    assert first.startswith("cifar10-vgg data=generated")
    assert all(r["clean"] for r in result.of("teardown"))


@pytest.fixture(autouse=True)
def _nothing_left(slurm_cluster: SlurmCluster) -> Any:
    yield
    left = slurm_cluster.squeue_ids()
    if left:
        slurm_cluster.run(["scancel", *left])
    assert not left, f"jobs left in squeue: {left}"
