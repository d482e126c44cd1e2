"""Preflight's settings check: NCCL and the distributed environment compared across nodes."""

from __future__ import annotations

from ddptui.core.preflight.model import Observations
from ddptui.core.preflight.preflight import evaluate
from ddptui.core.preflight.settings_rule import check_settings

from .test_rules import cell, failures, healthy


def with_env(obs: Observations, node: str, **env: str) -> Observations:
    obs.facts[node]["python"]["env"] = dict(env)
    return obs


def test_nodes_that_agree_pass_with_what_they_share() -> None:
    obs = healthy()
    for node in ("node1", "node2", "node3"):
        with_env(obs, node, NCCL_DEBUG="WARN")
        obs.facts[node]["python"]["nccl"] = "2.21.5"
    found = cell(evaluate(obs), "node2", "settings")
    assert found.status == "ok"
    assert found.detail == "NCCL 2.21.5; 1 NCCL_/TORCH_NCCL_/GLOO_ variable(s)"


def test_a_variable_one_node_sets_warns_on_that_node_alone() -> None:
    obs = with_env(healthy(), "node3", NCCL_IB_DISABLE="1")
    bad = failures(obs)
    assert list(bad) == [("node3", "settings")]
    assert bad["node3", "settings"].status == "warn"
    assert bad["node3", "settings"].detail == (
        "NCCL_IB_DISABLE=1 here; unset on node1 and 1 other(s)"
    )
    assert "--env NAME=VALUE" in bad["node3", "settings"].fix


def test_the_job_s_own_env_is_what_every_node_sees() -> None:
    obs = with_env(healthy(), "node3", NCCL_IB_DISABLE="1")
    obs.env = {"NCCL_IB_DISABLE": "1"}  # --env sets it for every rank: no difference left
    assert failures(obs) == {}


def test_another_nccl_on_one_node_fails() -> None:
    obs = healthy()
    for node, version in (("node1", "2.21.5"), ("node2", "2.21.5"), ("node3", "2.19.3")):
        obs.facts[node]["python"]["nccl"] = version
    bad = failures(obs)
    assert list(bad) == [("node3", "settings")]
    assert bad["node3", "settings"].status == "fail"
    assert bad["node3", "settings"].detail == "NCCL 2.19.3 here; 2.21.5 on node1 and 1 other(s)"


def test_a_known_bad_nccl_warns_with_its_source() -> None:
    obs = healthy()
    for node in ("node1", "node2", "node3"):
        obs.facts[node]["python"]["nccl"] = "2.25.1"
    findings = [f for f in check_settings(obs) if f.node == "node1"]
    (warned,) = findings
    assert warned.status == "warn" and warned.detail.startswith("NCCL 2.25.1: ncclCommAbort hangs")
    assert "2.26.2 or later" in warned.fix
    assert "https://github.com/pytorch/pytorch/issues/149153" in warned.fix


def test_a_node_whose_python_does_not_run_is_skipped() -> None:
    obs = healthy()
    obs.facts["node2"]["python"] = {"error": "bash: conda: command not found"}
    assert cell(evaluate(obs), "node2", "settings").status == "skip"


def test_a_known_bad_nccl_without_a_named_fix_points_at_its_source() -> None:
    obs = healthy()
    for node in ("node1", "node2", "node3"):
        obs.facts[node]["python"]["nccl"] = "2.18.1"
    (warned,) = [f for f in check_settings(obs) if f.node == "node2"]
    assert warned.status == "warn" and "NCCL_PROTO=^LL128" in warned.detail
    assert warned.fix.startswith("use another NCCL release, or the workaround its source gives")
    assert "rel_2-18-1.html" in warned.fix
