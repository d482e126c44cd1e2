"""Elastic jobs' shape: `--nodes MIN:MAX` from a flag or a profile, the torchrun line it gives,
spares, and the session's membership decisions (whether the job goes on without a node)."""

from __future__ import annotations

import pytest

from ddptui.core.events import Event, Notice
from ddptui.core.job import rules
from ddptui.core.job.elastic import goes_on, nnodes_for, parse_nodes, split_node_range
from ddptui.core.job.plan import UNSHARED_STORE, NodeTarget, build_plan
from ddptui.core.job.profiles import parse_profiles
from ddptui.core.job.resolve import resolve_job
from ddptui.core.job.spec import SpecError, make_spec
from ddptui.core.monitor.cycles import MembershipChanged
from ddptui.core.session.membership import (
    Membership,
    NodeAction,
    NodeActionKind,
    parse_action,
)


def test_node_ranges_parse_and_refuse() -> None:
    assert parse_nodes("2:3").nnodes() == "2:3" and parse_nodes("2:3").elastic
    assert parse_nodes("3").nnodes() == "3" and not parse_nodes(3).elastic
    for bad in ("3:2", "0:2", "a:b", "2:"):
        with pytest.raises(SpecError):
            parse_nodes(bad)


def test_a_range_gives_max_nodes_min_nodes_and_restarts() -> None:
    fields = split_node_range({"nodes": "2:4"})
    assert fields == {"nodes": 4, "min_nodes": 2, "max_restarts": 3}
    assert split_node_range({"nodes": "2:4", "max_restarts": 7})["max_restarts"] == 7
    assert split_node_range({"nodes": 3}) == {"nodes": 3}


def test_flags_and_profiles_make_an_elastic_ssh_job_with_a_spare() -> None:
    spec = resolve_job(
        {"script": "t.py", "hosts": ("a", "b", "c", "d"), "nodes": "2:3", "spares": 1}
    )
    assert (spec.nodes, spec.min_nodes, spec.spares, spec.max_restarts) == (3, 2, 1, 3)
    assert spec.hosts == ("a", "b", "c", "d")  # the spare host is kept
    profiles = parse_profiles('[profiles.el]\nscript = "t.py"\nnodes = "1:2"\n', "test")
    assert profiles["el"].fields["nodes"] == "1:2"


def test_spares_need_ssh_an_elastic_job_and_hosts() -> None:
    def said(**fields: object) -> list[str]:
        return [p.field for p in rules.problems(fields)]

    assert said(backend="local", nodes=2, spares=1, min_nodes=1) == ["spares"]
    assert said(backend="ssh", hosts=("a", "b"), nodes=2, spares=1, min_nodes=1) == ["spares"]
    assert said(backend="ssh", hosts=("a", "b", "c"), nodes=2, spares=1) == ["spares"]
    assert said(backend="ssh", hosts=("a", "b", "c"), nodes=2, spares=1, min_nodes=1) == []
    assert said(backend="ssh", hosts=("a", "b", "c"), nodes=2, spares=1, max_restarts=3) == []


def test_the_plan_runs_nnodes_min_max_and_the_first_node_hosts() -> None:
    spec = make_spec(script="t.py", nodes=2, min_nodes=1, max_restarts=3, spares=1)
    nodes = [NodeTarget(n, f"10.0.0.{i}") for i, n in enumerate(("a", "b", "c"))]
    plan = build_plan(spec, nodes, "run", 29400)
    for command in plan.commands:
        assert "--nnodes=1:2" in command.argv and "--max-restarts=3" in command.argv
    confs = [next(a for a in c.argv if a.startswith("--rdzv_conf=")) for c in plan.commands]
    assert confs == ["--rdzv_conf=is_host=true"] + ["--rdzv_conf=is_host=false"] * 2
    fixed = build_plan(make_spec(script="t.py", nodes=2), nodes[:2], "run", 29400)
    assert all("--nnodes=2" in c.argv for c in fixed.commands)
    assert not any(a.startswith("--rdzv_conf") for c in fixed.commands for a in c.argv)
    assert nnodes_for(spec, 2) == "1:2"
    # a node may join a later round (a spare, an elastic job's node back): not the shared
    # store, whose round's MASTER_ADDR only an agent's first rendezvous writes
    assert all(c.env[UNSHARED_STORE] == "1" for c in plan.commands)
    assert not any(UNSHARED_STORE in c.env for c in fixed.commands)
    kept = make_spec(script="t.py", nodes=2, spares=1, max_restarts=3)
    assert all(c.env[UNSHARED_STORE] == "1" for c in build_plan(kept, nodes, "r", 1).commands)


def test_membership_goes_on_while_min_nodes_remain_and_a_spare_joins() -> None:
    said: list[Event] = []
    spec = make_spec(script="t.py", nodes=3, min_nodes=2, max_restarts=3)
    membership = Membership(spec, said.append)
    exits: dict[str, int | None] = {"a": None, "b": None, "c": None}
    assert membership.node_left("c", exits) == (True, None)
    assert isinstance(said[-1], MembershipChanged) and said[-1].nodes == ("a", "b")
    exits["c"] = -15
    assert membership.node_left("b", exits) == (False, None)  # one left: fewer than 2
    assert isinstance(said[-1], Notice) and "fewer than the 2" in said[-1].message
    assert goes_on(spec, 2) and not goes_on(spec, 1)


def test_a_fixed_job_with_a_spare_goes_on_when_the_spare_joins() -> None:
    said: list[Event] = []
    spec = make_spec(script="t.py", nodes=2, max_restarts=3, spares=1)
    membership = Membership(spec, said.append)
    commands = build_plan(spec, [NodeTarget(n, n) for n in ("a", "b", "c")], "run", 29400).commands
    assert [c.node for c in membership.split(commands)] == ["a", "b"]
    goes, spare = membership.node_left("b", {"a": None, "b": None})
    assert goes and spare is not None and spare.node == "c"
    assert membership.node_left("a", {"a": None, "b": -15}) == (False, None)  # none left


def test_a_fixed_job_never_goes_on_and_drain_is_remembered() -> None:
    said: list[Event] = []
    membership = Membership(make_spec(script="t.py", nodes=2), said.append)
    assert membership.node_left("b", {"a": None, "b": None}) == (False, None)
    assert said == []
    assert membership.operator_took("b", NodeAction(NodeActionKind.DRAIN, "b")) == "drained"
    assert membership.drained("b")


def test_control_file_lines() -> None:
    assert parse_action("kill node3") == NodeAction(NodeActionKind.KILL, "node3")
    assert parse_action("drain n1") == NodeAction(NodeActionKind.DRAIN, "n1")
    assert parse_action("kill_rank n1 1") == NodeAction(NodeActionKind.KILL_RANK, "n1", 1)
    assert parse_action("reboot n1") is None and parse_action("kill") is None
