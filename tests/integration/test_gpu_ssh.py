"""GPU telemetry over the SSH testbed (real sshd per host, real torchrun, gloo on CPU): the node
helper started over SSH runs the sampler with the job, and finds a stand-in `nvidia-smi`
replaying captures from 2 x H100 on its PATH, given by the node's python launcher (`--python`,
a wrapper script as a site's module setup would be). Asserts gpu events from each host, each
rank on its host's GPU, and the GPU part of each host's teardown proof."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testbed import Testbed
from testbed.gpu_standin import FAKE_SMI, assert_ranks_mapped
from tests.integration.sshrun import TRAINER, run_headless

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).parents[1] / "data" / "gpu" / "standin"


def test_ssh_hosts_send_gpu_samples_with_ranks_and_prove_gpus_free(
    testbed: Testbed, tmp_path: Path
) -> None:
    smi = tmp_path / "smi"
    shutil.copytree(CAPTURE, smi)
    python = tmp_path / "python-gpu"
    python.write_text(
        "#!/bin/sh\n"
        f'export PATH="{FAKE_SMI}:$PATH" FAKE_SMI_DIR="{smi}" DDPTUI_GPU_SOURCE=smi\n'
        'exec python3 "$@"\n'
    )
    python.chmod(0o755)
    run = run_headless(
        testbed,
        tmp_path / "state",
        "--hosts",
        "node[1-2]",
        "--python",
        str(python),
        "--gpu-sample-ms",
        "300",
        str(TRAINER / "elastic_ddp.py"),
        "--steps",
        "1500",
    )
    assert run.code == 0, (run.summary, run.stderr[-3000:])
    gpu = run.of("gpu")
    assert_ranks_mapped(gpu, {"node1": [[0], [1]], "node2": [[2], [3]]})
    # one nvidia-smi loop a host for the job, not a process a sample
    calls = (smi / "calls.log").read_text().splitlines()
    assert sum("-lms=300" in c for c in calls) == 2
    teardown = run.of("teardown")
    assert sorted(t["node"] for t in teardown) == ["node1", "node2"]
    for report in teardown:
        assert report["clean"], report
        proof = report["gpu"]
        assert proof["clean"] and proof["held"] == [], report
        assert proof["mem_before_mib"] == [[0, 1281], [1, 993]]
        assert proof["mem_used_mib"] == [[0, 0], [1, 0]]
    logs = "".join(p.read_text() for p in (Path(run.summary["run_dir"]) / "nodes").glob("*.log"))
    assert "ddptui:gpu" not in logs and "step=1500" in logs
