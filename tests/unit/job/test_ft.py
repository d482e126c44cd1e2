"""A torchft job's plan: one replica group per node, each its own torchrun and rendezvous,
told its group and the Lighthouse's address; the Lighthouse started on the first node."""

from __future__ import annotations

import shlex

import pytest

from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.spec import SpecError, make_spec


def test_each_node_runs_its_own_group_and_the_first_starts_the_lighthouse() -> None:
    spec = make_spec(script="ft.py", nodes=3, ft_replicas=3, ft_min_replicas=2)
    nodes = [NodeTarget(n, f"10.0.0.{i + 1}") for i, n in enumerate(("a", "b", "c"))]
    plan = build_plan(spec, nodes, "run", 29400)
    for index, command in enumerate(plan.commands):
        assert command.env["REPLICA_GROUP_ID"] == str(index)
        assert command.env["NUM_REPLICA_GROUPS"] == "3"
        assert command.env["TORCHFT_LIGHTHOUSE"] == "http://10.0.0.1:29510"
        argv = list(command.argv)
        assert "--nnodes=1" in argv and f"--rdzv_id=run.g{index}" in argv
        assert f"--rdzv_endpoint=10.0.0.{index + 1}:29400" in argv  # its own rendezvous
    first = plan.commands[0].argv
    assert first[:2] == ("sh", "-c") and first[3] == "sh"
    started = shlex.split(first[2].split(" 2>")[0])
    assert started == [
        "torchft_lighthouse", "--min_replicas", "2", "--bind", "[::]:29510",
        "--join_timeout_ms", "2000",
    ]  # fmt: skip
    assert first[4].endswith("torchrun") or first[4] == "torchrun"
    assert all(c.argv[0] != "sh" for c in plan.commands[1:])


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"nodes": 2, "ft_replicas": 3}, "--nodes must be 3"),
        ({"nodes": 3, "min_nodes": 2, "ft_replicas": 3}, "no --nodes MIN:MAX"),
        ({"nodes": 2, "ft_replicas": 2, "ft_min_replicas": 3}, "above the 2 replica group"),
    ],
)
def test_a_torchft_shape_that_cannot_be_is_refused(fields: dict, said: str) -> None:
    with pytest.raises(SpecError, match=said):
        make_spec(script="ft.py", **fields)
