"""The gang test's judgement: each node's busbw, a slow node named, a failed test said.

The lines are as trainer/gang_check.py prints them; the figures are from real runs (gloo on
this 2-core VM: `ddptui preflight`; NCCL on 2 x H100: bench/results/gpu_preflight_h100x2.md).
"""

from __future__ import annotations

from pathlib import Path

from ddptui.core.job.plan import NodeTarget
from ddptui.core.preflight.gang import GangNode, GangRun, check_gang, judge, parse_line
from ddptui.core.preflight.model import Observations

CPU_LINE = (
    "[ddptui:0:0]:ddptui-gang group_rank={g} host=vm backend=gloo ranks=2 world=4 "
    "bytes=4194304 node_busbw={own} all_busbw=0.198"
)


def nodes(*figures: str) -> dict[str, GangNode]:
    found = {}
    for g, own in enumerate(figures):
        line = parse_line(CPU_LINE.format(g=g, own=own))
        assert line is not None
        found[f"n{g}"] = line
    return found


def test_a_line_reads_back() -> None:
    got = parse_line(CPU_LINE.format(g=1, own="0.279"))
    assert got == GangNode(1, "vm", "gloo", 2, 4, 4194304, 0.279, 0.198)
    single = parse_line(CPU_LINE.format(g=0, own="-"))
    assert single is not None and single.node_busbw is None
    assert parse_line("envcheck rank=0 allreduce=ok sum=10") is None


def test_nodes_alike_pass_with_their_figures() -> None:
    found = judge(nodes("0.279", "0.212"), ["n0", "n1"])
    assert [f.status for f in found] == ["ok", "ok"]
    assert found[0].detail.startswith("its 2 ranks 0.279 GB/s; all 4 ranks 0.198 GB/s (gloo")


def test_a_node_far_under_the_others_median_is_named() -> None:
    found = judge(nodes("0.279", "0.041", "0.25", "0.26"), ["n0", "n1", "n2", "n3"])
    assert [f.status for f in found] == ["ok", "fail", "ok", "ok"]
    assert found[1].detail.startswith(
        "slow node: 0.041 GB/s among its 2 ranks, under 0.2 of the other nodes' median 0.26 GB/s"
    )
    assert "nvidia-smi topo -m" in found[1].fix
    # gloo on shared cores: twice slower is noise (seen on this VM), not a slow node
    assert {f.status for f in judge(nodes("0.022", "0.010"), ["n0", "n1"])} == {"ok"}


def test_on_nccl_half_the_others_median_is_slow() -> None:
    line = _h100("preflight_1x2_000-local0.log")
    slow = GangNode(1, "vm", "nccl", 2, 2, line.nbytes, 120.0, line.all_busbw)
    found = judge({"n0": line, "n1": slow}, ["n0", "n1"])
    assert [f.status for f in found] == ["ok", "fail"]
    assert found[1].detail.startswith("slow node: 120 GB/s among its 2 ranks, under half the")


def test_a_floor_names_every_node_under_it() -> None:
    found = judge(nodes("0.279", "0.212"), ["n0", "n1"], min_busbw=0.25)
    assert [f.status for f in found] == ["ok", "fail"]
    assert found[1].detail.startswith("0.212 GB/s under the 0.25 GB/s asked")
    single = judge(nodes("-", "-"), ["n0", "n1"], min_busbw=1.0)
    assert [f.status for f in single] == ["warn", "warn"]  # which node it is cannot be told


def test_a_node_without_a_line_and_a_failed_run_fail() -> None:
    assert judge(nodes("0.279"), ["n0", "n1"])[1].detail == "no result from this node"
    obs = Observations([NodeTarget("n0", "a"), NodeTarget("n1", "b")], 1)
    obs.facts = {"n0": {}, "n1": {}}
    obs.gang = GangRun(nodes("0.279"), error="rank 2 on n1 failed first (exit 1)", run_id="r9")
    found = check_gang(obs)
    assert [(f.node, f.status) for f in found] == [("n1", "fail")]
    assert "r9" in found[0].fix and found[0].detail.endswith("failed first (exit 1)")
    obs.gang = None
    obs.gang_skipped = "not run: torch on n0 failed"
    assert {f.detail for f in check_gang(obs)} == {"not run: torch on n0 failed"}


H100 = Path(__file__).resolve().parents[2] / "data" / "gpu" / "h100x2_preflight"


def _h100(log: str) -> GangNode:
    found = [g for line in (H100 / log).read_text().splitlines() if (g := parse_line(line))]
    assert len(found) == 1
    return found[0]


def test_nccl_figures_from_2_x_h100() -> None:
    one_node = _h100("preflight_1x2_000-local0.log")
    assert (one_node.backend, one_node.ranks, one_node.nbytes) == ("nccl", 2, 64 << 20)
    [ok] = judge({"local0": one_node}, ["local0"], min_busbw=100.0)
    assert ok.status == "ok" and ok.detail.startswith("its 2 ranks 254.138 GB/s; all 2 ranks")
    two = {
        "local0": _h100("preflight_2x1_000-local0.log"),
        "local1": _h100("preflight_2x1_001-local1.log"),
    }
    assert {g.node_busbw for g in two.values()} == {None}
    found = judge(two, ["local0", "local1"])
    assert [f.status for f in found] == ["ok", "ok"]
    assert "one process per node" in found[0].detail
    # the same figures against a floor above them: every node is flagged, none can be named
    assert {f.status for f in judge(two, ["local0", "local1"], min_busbw=300.0)} == {"warn"}
