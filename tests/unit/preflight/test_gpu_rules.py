"""The gpu check on what GPU nodes report: counts, driver and CUDA alike, ECC, remapping, Xid.

The health facts come from real reports: `nvidia-smi -q` of a 2 x H100 machine
(tests/data/gpu/h100x2_first), read by the node probe's own parser.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from ddptui.core.node.probe import parse_smi_q
from ddptui.core.preflight.model import Finding, Observations
from ddptui.core.preflight.rules import evaluate
from tests.unit.preflight.test_rules import NODES, facts, healthy

DATA = Path(__file__).resolve().parents[2] / "data" / "gpu"
SMI_Q = (DATA / "h100x2_first" / "nvidia_smi_q.txt").read_text()
H100 = ["NVIDIA H100 80GB HBM3", "580.159.04", "81559 MiB", "00000000:00:06.0"]
CUDA = {"cuda_build": "13.0", "cuda_available": True, "cuda_devices": 2}


def gpu_facts(**over: Any) -> dict[str, Any]:
    report = {
        "present": True,
        "gpus": [H100, [*H100[:3], "00000000:00:07.0"]],
        "health": parse_smi_q(SMI_Q),
        "xid": {"readable": True, "xids": []},
    }
    report.update(over)
    return report


def gpu_nodes(**over: Any) -> Observations:
    obs = healthy()
    for i in (1, 2, 3):
        obs.facts[f"node{i}"] = facts(i, gpu=gpu_facts(**over), python=CUDA)
    return obs


def gpu(obs: Observations, node: str = "node1") -> Finding:
    return next(f for f in evaluate(obs) if f.node == node and f.check == "gpu")


def test_the_h100_report_reads_clean() -> None:
    health = parse_smi_q(SMI_Q)
    assert health["cuda"] == "13.0" and health["source"] == "nvidia-smi"
    assert health["gpus"] == [
        {"index": i, "ecc_uncorrected": 0, "remap_pending": False, "remap_failed": False}
        for i in (0, 1)
    ]
    ok = gpu(gpu_nodes())
    assert ok.status == "ok"
    assert ok.detail == (
        "2 x NVIDIA H100 80GB HBM3, driver 580.159.04 (CUDA 13.0), torch CUDA 13.0; "
        "ECC/remap clean (nvidia-smi), no Xid in the kernel log"
    )


def test_uncorrectable_ecc_and_remapping_fail_the_node() -> None:
    text = re.sub(r"(DRAM Uncorrectable\s+: )0", r"\g<1>3", SMI_Q, count=1)
    text = re.sub(r"(Remapping Failure Occurred\s+: )No", r"\g<1>Yes", text, count=1)
    obs = gpu_nodes()
    obs.facts["node2"]["gpu"]["health"] = parse_smi_q(text)
    bad = gpu(obs, "node2")
    assert bad.status == "fail"
    assert "GPU 0: 3 uncorrectable ECC error(s) since boot" in bad.detail
    assert "GPU 0: memory row remapping failed" in bad.detail
    assert "nvidia-smi -r" in bad.fix
    assert gpu(obs, "node1").status == "ok"


def test_xid_reports_warn_and_an_unreadable_log_is_said() -> None:
    obs = gpu_nodes()
    obs.facts["node1"]["gpu"]["xid"] = {"readable": True, "xids": [["0000:00:07.0", 79]]}
    obs.facts["node3"]["gpu"]["xid"] = {"readable": False, "why": "Operation not permitted"}
    assert gpu(obs).status == "warn"
    assert gpu(obs).detail == "kernel log: Xid 79 on 0000:00:07.0"
    assert gpu(obs, "node3").detail.endswith("kernel log not readable (Xid unchecked)")


def test_driver_cuda_and_torch_builds_must_match() -> None:
    obs = gpu_nodes()
    other = copy.deepcopy(obs.facts["node3"]["gpu"])
    other["gpus"] = [[H100[0], "570.86.15", *H100[2:]]] * 2
    other["health"]["cuda"] = "12.8"
    obs.facts["node3"]["gpu"] = other
    obs.facts["node2"]["python"]["cuda_build"] = "12.6"
    odd = gpu(obs, "node3")
    assert odd.status == "warn"
    assert "driver 570.86.15; 580.159.04 on node1 and 1 other(s)" in odd.detail
    assert "CUDA (driver) 12.8; 13.0 on node1 and 1 other(s)" in odd.detail
    assert gpu(obs, "node2").detail == "torch CUDA 12.6; 13.0 on node1 and 1 other(s)"


def test_pseudo_nodes_share_one_machines_gpus() -> None:
    obs = gpu_nodes()
    obs.backend, obs.nodes_per_machine = "local", 3
    obs.nproc_per_node = 1
    assert gpu(obs).status == "fail"
    assert gpu(obs).detail == (
        "the job needs 3 GPUs here (3 pseudo-nodes x 1 process), the node has 2"
    )
    obs.env = {"CUDA_VISIBLE_DEVICES": ""}
    assert gpu(obs).status == "ok" and gpu(obs).detail.endswith("CPU job")
    obs.env = {}
    obs.gpu_split = False  # --no-gpu-split: the operator shares them on purpose
    assert gpu(obs).status == "ok"


def test_nodes_list_is_the_shared_one() -> None:
    assert [n.name for n in NODES] == ["node1", "node2", "node3"]
