"""The world check: each node's rendezvous (as its agent logs it) against the job's plan."""

from __future__ import annotations

from ddptui.core.events import (
    Diagnosis,
    RankChanged,
    RankState,
    RendezvousAsked,
    WorldJoined,
)
from ddptui.core.job.plan import LaunchPlan, NodeCommand
from ddptui.core.monitor.agent_log import AgentLogParser, Assigned, Configured
from ddptui.core.monitor.monitor import Monitor
from ddptui.core.session.world_check import (
    PROBE_AFTER_S,
    PROBE_CONFIRM_S,
    WorldCause,
    WorldCheck,
)
from tests.cases import TORCHRUN_CAPTURES as DATA

ENDPOINT = "10.0.0.11:29400"


def _plan(addresses: tuple[str, ...] = ("10.0.0.11", "10.0.0.12", "10.0.0.13")) -> LaunchPlan:
    commands = tuple(
        NodeCommand(f"node{i + 1}", a, i, ("torchrun",), {}, None, None, f"r1.{i}")
        for i, a in enumerate(addresses)
    )
    return LaunchPlan("r1", f"{addresses[0]}:29400", 2, commands)


def test_the_agents_launch_configs_and_result_are_read_from_real_torchrun_lines() -> None:
    parser = AgentLogParser()
    facts = []
    for line in (DATA / "success_node1.log").read_text().splitlines():
        facts += parser.feed(line)
    [configured] = [f for f in facts if isinstance(f, Configured)]
    assert configured == Configured("x29611", "127.0.0.1:29611", 2, 2)
    [assigned] = [f for f in facts if isinstance(f, Assigned)]
    assert (assigned.nodes, assigned.world_size, assigned.master_addr) == (2, 4, "127.0.0.1")
    monitor = Monitor(["n1"], 2)
    events = monitor.feed("n1", (DATA / "success_node1.log").read_bytes())
    [asked] = [e for e in events if isinstance(e, RendezvousAsked)]
    assert (asked.node, asked.run_id, asked.endpoint, asked.max_nodes) == (
        "n1",
        "x29611",
        "127.0.0.1:29611",
        2,
    )
    joined = [e for e in events if isinstance(e, WorldJoined)]
    assert [(j.group_rank, j.nodes, j.world_size) for j in joined] == [(1, 2, 4)]


def test_the_right_rendezvous_and_world_pass() -> None:
    check = WorldCheck(_plan(), 0.0)
    for i in range(3):
        assert check.seen(RendezvousAsked(f"node{i + 1}", "r1", ENDPOINT, 3, 3)) is None
    for i in range(3):
        assert check.seen(WorldJoined(f"node{i + 1}", i, 3, 6, "10.0.0.11")) is None
    assert check.complete() and check.probe_due(100.0) == []


def test_a_node_started_for_its_own_endpoint_is_a_split_world() -> None:
    check = WorldCheck(_plan(), 0.0)
    problem = check.seen(RendezvousAsked("node2", "r1", "10.0.0.12:29400", 3, 3))
    assert problem is not None and problem.node == "node2"
    assert problem.cause == WorldCause.SPLIT_WORLD
    assert problem.explanation.startswith(
        "node2 was started for another rendezvous: its agent asked 10.0.0.12:29400 (run id r1), "
        "the job's is 10.0.0.11:29400 (run id r1) on node1"
    )
    batch = WorldCheck(_plan(), 0.0, compare_endpoint=False)  # a batch script's own endpoint
    assert batch.seen(RendezvousAsked("node2", "r1", "$head:29400", 3, 3)) is None


def test_a_node_alone_or_a_world_too_small_is_named() -> None:
    alone = WorldCheck(_plan(), 0.0).seen(WorldJoined("node3", 0, 1, 2, "10.0.0.13"))
    assert alone is not None and (alone.node, alone.cause) == ("node3", WorldCause.SPLIT_WORLD)
    assert alone.explanation.startswith("node3 is alone in its own world (1 node, 2 worker(s)")
    small = WorldCheck(_plan(), 0.0).seen(WorldJoined("node1", 0, 2, 4, "10.0.0.11"))
    assert small is not None and small.cause == WorldCause.SMALL_WORLD
    assert "joined a world of 2 node(s) and 4 worker(s); the job asked 3 nodes and 6" in (
        small.explanation
    )
    elastic = WorldCheck(_plan(), 0.0).seen(RendezvousAsked("node1", "r1", ENDPOINT, 1, 2))
    assert elastic is not None and elastic.cause == WorldCause.SMALL_WORLD


def test_the_nodes_are_asked_who_holds_the_port_while_no_world_forms() -> None:
    check = WorldCheck(_plan(), 100.0)
    assert check.probe_due(100.0 + PROBE_AFTER_S - 1) == []
    assert check.probe_due(100.0 + PROBE_AFTER_S) == ["node1", "node2", "node3"]
    assert check.probe_due(100.0 + PROBE_AFTER_S + 1) == []  # not again at once
    said = Diagnosis("port_in_use", "port 29400 is already in use on this node")
    check.seen(RankChanged(None, "node1", 0, RankState.PENDING, diagnoses=(said,)))
    assert check.probe_due(100.0 + PROBE_AFTER_S + 2) == ["node1", "node2", "node3"]
    local = WorldCheck(_plan(("127.0.0.1", "127.0.0.1")), 0.0)  # pseudo-nodes share the host
    assert local.probe_due(PROBE_AFTER_S) == ["node1"]
    apart = WorldCheck(_plan(("127.0.0.2", "127.0.0.3")), 0.0)  # the local backend's: one host
    assert apart.probe_due(PROBE_AFTER_S) == ["node1"]


def test_who_holds_the_port_names_a_squatter_or_a_node_serving_itself() -> None:
    check = WorldCheck(_plan(), 0.0)
    squatter = {"pid": 1234, "user": "alice", "cmd": "python3 serve.py", "tag": ""}
    ours = {"pid": 99, "user": "root", "cmd": "torchrun ...", "tag": "r1.0"}
    assert check.holders_seen({"node1": [ours], "node2": [], "node3": []}) is None
    assert check.holders_seen({"node1": [squatter], "node2": []}) is None  # seen once
    taken = check.holders_seen({"node1": [squatter], "node2": []})  # and again
    assert taken is not None and (taken.node, taken.cause) == ("node1", WorldCause.PORT_TAKEN)
    assert taken.explanation.startswith(
        "port 29400 on node1 is in use by PID 1234 (user alice, python3 serve.py): "
    )
    itself = {"pid": 77, "user": "root", "cmd": "torchrun ...", "tag": "r1.1"}
    assert check.holders_seen({"node1": [ours], "node2": [itself]}) is None
    split = check.holders_seen({"node1": [ours], "node2": [itself]})
    assert split is not None and (split.node, split.cause) == ("node2", WorldCause.SPLIT_WORLD)
    assert split.explanation.startswith("node2 serves a rendezvous of its own on port 29400")
    # node2's agent bound the port first on a host it shares with node1: the one store
    assert check.holders_seen({"node1": [itself], "node2": [itself]}) is None


def test_a_listener_caught_closing_is_no_holder() -> None:
    """The agent serving the store on a host shared by the nodes ends at its join timeout:
    one probe catches its listening socket with no process left holding it (or one whose
    environment is already gone). Found once, asked again PROBE_CONFIRM_S later, it is gone:
    nothing is named. A squatter found twice in a row is."""
    check = WorldCheck(_plan(), 0.0)
    closing = {"pid": None, "user": "root", "cmd": "", "tag": ""}
    assert check.probe_due(PROBE_AFTER_S) == ["node1", "node2", "node3"]
    assert check.holders_seen({"node1": [closing]}) is None
    assert check.probe_due(PROBE_AFTER_S + PROBE_CONFIRM_S - 0.1) == []
    assert check.probe_due(PROBE_AFTER_S + PROBE_CONFIRM_S) == ["node1", "node2", "node3"]
    assert check.holders_seen({"node1": []}) is None
    assert check.probe_due(PROBE_AFTER_S + PROBE_CONFIRM_S + 1) == []  # back to its rhythm
    assert check.holders_seen({"node1": [closing]}) is None
    taken = check.holders_seen({"node1": [closing]})
    assert taken is not None and taken.cause == WorldCause.PORT_TAKEN


def test_an_elastic_world_is_judged_by_its_floor() -> None:
    check = WorldCheck(_plan(), 0.0)
    assert check.seen(RendezvousAsked("node1", "r1", ENDPOINT, 2, 3)) is None
    assert check.seen(WorldJoined("node1", 0, 2, 4, "10.0.0.11")) is None
    assert check.seen(RendezvousAsked("node2", "r1", ENDPOINT, 2, 3)) is None
    alone = check.seen(WorldJoined("node2", 0, 1, 2, "10.0.0.12"))
    assert alone is not None and alone.cause == WorldCause.SPLIT_WORLD


def test_a_big_job_asks_a_few_nodes_per_round_in_turn() -> None:
    addresses = tuple(f"10.0.1.{i}" for i in range(1, 41))
    check = WorldCheck(_plan(addresses), 0.0)
    first = check.probe_due(PROBE_AFTER_S)
    second = check.probe_due(PROBE_AFTER_S + 100.0)
    assert first[0] == second[0] == "node1"
    assert len(first) == len(second) == 17 and not set(first[1:]) & set(second[1:])


def test_a_spare_held_back_is_not_in_the_first_world() -> None:
    """--nodes 2 --spares 1: node3 waits; the agents told --nnodes 2:2 and a world of two
    nodes are the job's world, and nobody asks node3 who holds the port."""
    check = WorldCheck(_plan(), 0.0, spares=frozenset({"node3"}))
    for node in ("node1", "node2"):
        assert check.seen(RendezvousAsked(node, "r1", ENDPOINT, 2, 2)) is None
    assert check.probe_due(PROBE_AFTER_S) == ["node1", "node2"]
    assert check.seen(WorldJoined("node1", 0, 2, 4, "10.0.0.11")) is None
    assert check.seen(WorldJoined("node2", 1, 2, 4, "10.0.0.11")) is None
    assert check.complete()
    small = WorldCheck(_plan(), 0.0)  # without it, the same agents' --nnodes is too small
    problem = small.seen(RendezvousAsked("node1", "r1", ENDPOINT, 2, 2))
    assert problem is not None and problem.cause == WorldCause.SMALL_WORLD
