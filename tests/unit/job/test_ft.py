"""A torchft job's plan: one replica group per node, each its own torchrun and rendezvous,
told its group and the Lighthouse's address; the Lighthouse started on the first node."""

from __future__ import annotations

import shlex

import pytest

from ddptui.cli.jobargs import cli_fields
from ddptui.cli.main import _parser
from ddptui.core.events import Event, Notice
from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.resolve import resolve_job
from ddptui.core.job.spec import SpecError, make_spec
from ddptui.core.monitor.cycles import MembershipChanged
from ddptui.core.session.membership import Membership, NodeAction, NodeActionKind, parse_action


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
        "--join_timeout_ms", "2000", "--heartbeat_timeout_ms", "5000",
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


def test_pseudo_nodes_get_a_rendezvous_port_each_and_the_lighthouse_its_own() -> None:
    spec = make_spec(script="ft.py", nodes=2, ft_replicas=2, ft_lighthouse_port=30001)
    nodes = [NodeTarget("local0", "127.0.0.1"), NodeTarget("local1", "127.0.0.1")]
    plan = build_plan(spec, nodes, "run", 29400, group_ports={"local1": 29455})
    endpoints = [next(a for a in c.argv if a.startswith("--rdzv_endpoint=")) for c in plan.commands]
    assert endpoints == ["--rdzv_endpoint=127.0.0.1:29400", "--rdzv_endpoint=127.0.0.1:29455"]
    assert all(c.env["TORCHFT_LIGHTHOUSE"] == "http://127.0.0.1:30001" for c in plan.commands)
    assert "[::]:30001" in plan.commands[0].argv[2]


def test_flags_make_a_torchft_job_of_one_node_a_group() -> None:
    """`--ft-replicas 3` alone: three nodes, the bundled trainer, restarts to come back with."""
    spec = resolve_job({"ft_replicas": 3, "nproc_per_node": 1})
    assert (spec.nodes, spec.ft_replicas, spec.ft_min_replicas) == (3, 3, 1)
    assert spec.script.endswith("trainer/ft_ddp.py") and spec.max_restarts == 10
    assert resolve_job({"ft_replicas": 2, "max_restarts": 0, "script": "t.py"}).max_restarts == 0
    args = _parser().parse_args(
        ["--ft-replicas", "2", "--ft-min-replicas", "2", "--ft-lighthouse-port", "1234"]
        + ["--ft-join-timeout-ms", "500", "--ft-heartbeat-timeout-ms", "9000"]
    )
    fields = cli_fields(args, "t.py", [])
    assert (fields["ft_join_timeout_ms"], fields["ft_heartbeat_timeout_ms"]) == (500, 9000)
    assert (fields["ft_replicas"], fields["ft_min_replicas"]) == (2, 2)
    assert fields["ft_lighthouse_port"] == 1234


def test_a_lost_group_leaves_the_others_while_the_quorum_holds() -> None:
    said: list[Event] = []
    spec = make_spec(script="t.py", nodes=3, ft_replicas=3, ft_min_replicas=2)
    membership = Membership(spec, said.append)
    running: dict[str, int | None] = {"n0": None, "n1": None, "n2": None}
    assert membership.node_left("n1", running) == (True, None)
    assert isinstance(said[-1], MembershipChanged) and said[-1].nodes == ("n0", "n2")
    running["n1"] = 1
    assert membership.node_left("n2", running) == (False, None)  # one left: no quorum of 2
    assert isinstance(said[-1], Notice) and "fewer than the quorum's 2" in said[-1].message
    done: dict[str, int | None] = {"n0": 0, "n1": 1, "n2": 0}
    assert membership.finished_ok((), done) is True  # the lost group is history
    assert membership.ft_outcome(()) == (
        "torchft: finished on 2 of 3 replica group(s), quorum changed 0 time(s)"
    )
    assert membership.finished_ok((), {"n0": 0, "n1": 1, "n2": 3}) is False
    assert parse_action("kill_group n2") == NodeAction(NodeActionKind.KILL_GROUP, "n2")
