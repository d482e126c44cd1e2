"""Preflight rules on what nodes report: every check passes, fails and says how to fix it."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest

from ddptui.core.job.plan import NodeTarget
from ddptui.core.preflight.gang import GangRun, parse_line
from ddptui.core.preflight.preflight import CHECKS, Observations, evaluate
from ddptui.core.preflight.rules import Finding

NODES = [NodeTarget(f"node{i}", f"10.0.0.{10 + i}") for i in (1, 2, 3)]
GIB = 1 << 30


def facts(i: int, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "hostname": f"node{i}",
        "self": {"addrs": [f"10.0.0.{10 + i}"], "error": ""},
        "ifaces": {"127.0.0.1": "lo", f"10.0.0.{10 + i}": "eth0"},
        "python": {
            "python": "3.11.7",
            "executable": "/usr/bin/python3",
            "launcher": "/usr/bin/torchrun",
            "torch": "2.13.0+cpu",
            "torch_path": "/usr/lib/torch/__init__.py",
            "cuda_build": None,
            "cuda_available": False,
            "cuda_devices": 0,
        },
        "gpu": {"present": False},
        "disk": {"path": "/r/runs", "existing": "/r", "free": 50 * GIB, "writable": True},
        "script": {"path": "/w/train.py", "exists": True},
        "t_start": 1000.05,
        "elapsed": 0.02,
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


def healthy() -> Observations:
    obs = Observations(nodes=list(NODES), port=29400, nproc_per_node=2, script="train.py")
    for i, node in enumerate(NODES, 1):
        obs.facts[node.name] = facts(i)
        obs.timing[node.name] = (1000.0, 1000.1)
        obs.resolved[node.name] = {
            f"node{j}": {"addrs": [f"10.0.0.{10 + j}"], "error": ""} for j in (1, 2, 3)
        }
        obs.connects[node.name] = {"ok": True, "ms": 1.5}
    obs.listen = {"listening": True, "error": ""}
    line = "ddptui-gang group_rank={} host=node{} backend=gloo ranks=2 world=6 bytes=4194304 "
    obs.gang = GangRun(
        {
            node.name: parse_line(line.format(i, i + 1) + "node_busbw=0.279 all_busbw=0.198")
            for i, node in enumerate(NODES)
        }
    )
    return obs


def cell(findings: list[Finding], node: str, check: str) -> Finding:
    (found,) = [f for f in findings if f.node == node and f.check == check]
    return found


def failures(obs: Observations) -> dict[tuple[str, str], Finding]:
    return {(f.node, f.check): f for f in evaluate(obs) if f.status in ("fail", "warn")}


def test_a_healthy_cluster_passes_every_check() -> None:
    findings = evaluate(healthy())
    assert len(findings) == len(NODES) * len(CHECKS)
    assert {f.status for f in findings} == {"ok"}
    assert cell(findings, "node1", "gpu").detail == "no GPU (CPU job: gloo)"
    assert cell(findings, "node2", "rdzv-port").detail.startswith("reached node1 (10.0.0.11:29400)")
    assert cell(findings, "node1", "clock").detail == "the reference clock"


def test_an_unreachable_node_fails_reachable_and_skips_the_rest() -> None:
    obs = healthy()
    del obs.facts["node3"]
    obs.unreachable["node3"] = "node3: connection timed out"
    findings = evaluate(obs)
    reach = cell(findings, "node3", "reachable")
    assert reach.status == "fail" and "timed out" in reach.detail and "ssh HOST true" in reach.fix
    assert {f.status for f in findings if f.node == "node3" and f.check != "reachable"} == {"skip"}


def test_torch_missing_or_different_on_one_node() -> None:
    obs = healthy()
    probe = obs.facts["node2"]["python"]
    del probe["torch"]
    probe["torch_error"] = "ModuleNotFoundError: No module named 'torch'"
    bad = failures(obs)
    assert list(bad) == [("node2", "torch")]
    assert "cannot import torch: ModuleNotFoundError" in bad["node2", "torch"].detail
    assert "pip install torch==2.13.0" in bad["node2", "torch"].fix

    obs = healthy()
    obs.facts["node3"]["python"]["torch"] = "1.13.1"
    bad = failures(obs)
    assert list(bad) == [("node3", "torch")]
    assert "torch 1.13.1" in bad["node3", "torch"].detail
    assert "2.13.0+cpu on node1 and 1 other(s)" in bad["node3", "torch"].detail


def test_python_differs_and_torchrun_missing() -> None:
    obs = healthy()
    obs.facts["node1"]["python"]["python"] = "3.10.12"
    obs.facts["node2"]["python"]["launcher"] = None
    bad = failures(obs)
    assert set(bad) == {("node1", "python"), ("node2", "torch")}
    assert "3.11.7 on node2 and 1 other(s)" in bad["node1", "python"].detail
    assert "`torchrun` is not on the job's PATH" in bad["node2", "torch"].detail
    obs.facts["node1"]["python"] = {"error": "bash: conda: command not found"}
    bad = failures(obs)
    assert "conda: command not found" in bad["node1", "python"].detail
    assert "--activate" in bad["node1", "python"].fix


def test_gpus() -> None:
    gpus = {"present": True, "gpus": [["NVIDIA A100", "535.104", "81920 MiB"]] * 4}
    cuda = {"cuda_build": "12.1", "cuda_available": True, "cuda_devices": 4}
    obs = healthy()
    for i in (1, 2, 3):
        obs.facts[f"node{i}"] = facts(i, gpu=gpus, python=cuda)
    findings = evaluate(obs)
    assert (
        cell(findings, "node1", "gpu").detail == "4 x NVIDIA A100, driver 535.104, torch CUDA 12.1"
    )
    obs.facts["node3"]["gpu"] = {"present": False}
    obs.facts["node2"]["gpu"] = {"present": True, "gpus": [["NVIDIA A100", "550.54"]] * 4}
    obs.facts["node1"]["python"]["cuda_available"] = False
    bad = failures(obs)
    assert bad["node3", "gpu"].status == "fail" and "no GPU here" in bad["node3", "gpu"].detail
    assert bad["node2", "gpu"].status == "warn" and "driver 550.54" in bad["node2", "gpu"].detail
    assert "cannot use them" in bad["node1", "gpu"].detail
    obs.facts["node1"]["gpu"] = {"present": True, "error": "NVIDIA-SMI has failed"}
    assert "nvidia-smi failed" in failures(obs)["node1", "gpu"].detail
    obs = healthy()
    obs.nproc_per_node = 8
    for i in (1, 2, 3):
        obs.facts[f"node{i}"] = facts(i, gpu=gpus, python=cuda)
    too_many = failures(obs)["node1", "gpu"]
    assert (
        too_many.status == "fail"
        and too_many.detail == "8 processes per node, the node has 4 GPU(s)"
    )
    assert too_many.fix.startswith("--nproc-per-node 4")


def test_rendezvous_port_in_use_or_unreachable() -> None:
    obs = healthy()
    obs.listen = {"listening": False, "error": "Address already in use"}
    obs.connects.clear()
    findings = evaluate(obs)
    head = cell(findings, "node1", "rdzv-port")
    assert head.status == "fail" and "Address already in use" in head.detail
    assert "--rdzv-port" in head.fix and "ss -ltnp" in head.fix
    assert cell(findings, "node2", "rdzv-port").status == "skip"
    obs = healthy()
    obs.connects["node3"] = {"ok": False, "error": "timed out"}
    bad = failures(obs)
    assert list(bad) == [("node3", "rdzv-port")]
    assert "cannot reach node1 (10.0.0.11:29400): timed out" in bad["node3", "rdzv-port"].detail
    assert "firewall" in bad["node3", "rdzv-port"].fix


def test_hostname_resolving_to_loopback_is_the_127_0_1_1_trap() -> None:
    obs = healthy()
    obs.facts["node2"]["self"] = {"addrs": ["127.0.1.1"], "error": ""}
    bad = failures(obs)
    assert list(bad) == [("node2", "hostname")]
    assert "resolves to 127.0.1.1 (loopback)" in bad["node2", "hostname"].detail
    assert "--socket-ifname eth0" in bad["node2", "hostname"].fix


def test_nodes_disagreeing_about_an_address() -> None:
    obs = healthy()
    obs.resolved["node1"]["node3"] = {"addrs": ["10.0.0.99"], "error": ""}
    obs.resolved["node2"]["node3"] = {"addrs": [], "error": "Name or service not known"}
    bad = failures(obs)
    assert bad["node1", "hostname"].status == "fail"
    assert (
        "resolves node3's hostname 'node3' to 10.0.0.99, not 10.0.0.13"
        in bad["node1", "hostname"].detail
    )
    assert bad["node2", "hostname"].status == "warn"
    obs.facts["node3"]["self"] = {"addrs": [], "error": "Name or service not known"}
    assert "does not resolve here" in failures(obs)["node3", "hostname"].detail


@pytest.mark.parametrize(
    ("t_start", "status"),
    [(1005.05, "fail"), (995.0, "fail"), (1000.3, "ok"), (1000.05, "ok")],
)
def test_clock_skew(t_start: float, status: str) -> None:
    obs = healthy()
    obs.facts["node3"]["t_start"] = t_start
    found = cell(evaluate(obs), "node3", "clock")
    assert found.status == status, found
    if status == "fail":
        assert "chrony" in found.fix


def test_a_slow_reply_makes_a_skew_uncertain_not_failed() -> None:
    obs = healthy()
    obs.facts["node3"]["t_start"] = 1003.0
    obs.timing["node3"] = (1000.0, 1008.0)
    assert cell(evaluate(obs), "node3", "clock").status == "ok"


def test_disk_and_script() -> None:
    obs = healthy()
    obs.facts["node1"]["disk"]["free"] = 100 << 20
    obs.facts["node2"]["disk"]["free"] = 3 * GIB
    obs.facts["node3"]["disk"]["writable"] = False
    obs.facts["node3"]["script"] = {"path": "/w/train.py", "exists": False}
    bad = failures(obs)
    assert (
        bad["node1", "disk"].status == "fail"
        and "100.0 MiB free in /r" in bad["node1", "disk"].detail
    )
    assert bad["node2", "disk"].status == "warn"
    assert "cannot write in /r" in bad["node3", "disk"].detail
    assert bad["node3", "script"].detail == "/w/train.py not found"
    obs.container = "pytorch.sqsh"
    findings = evaluate(obs)
    assert cell(findings, "node3", "script").status == "skip"
    assert cell(findings, "node3", "torch").status == "skip"


def test_only_some_nodes_and_checks() -> None:
    obs = healthy()
    early = evaluate(copy.deepcopy(obs), only=("node2",), checks=("reachable", "disk"))
    assert [(f.node, f.check) for f in early] == [("node2", "reachable"), ("node2", "disk")]


def test_local_pseudo_nodes_share_one_machine() -> None:
    obs = healthy()
    obs.backend = "local"
    for i in (1, 2, 3):
        obs.facts[f"node{i}"]["self"] = {"addrs": ["127.0.1.1"], "error": ""}
        obs.facts[f"node{i}"]["t_start"] = 2000.0
    assert not failures(obs)


def test_preflight_profiles_and_history_never_import_textual_or_torch() -> None:
    code = (
        "import sys\n"
        "import ddptui.core.preflight.preflight, ddptui.core.job.profiles\n"
        "import ddptui.core.runs.history, ddptui.cli.reports\n"
        "bad = [m for m in sys.modules if m in ('textual', 'torch') or m.startswith('ddptui.ui')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
