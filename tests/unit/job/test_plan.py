"""Command building: the torchrun line of the manual procedure, quoted safely."""

from __future__ import annotations

import shlex

from ddptui.core.job.plan import LINE_PREFIX_TEMPLATE, NodeTarget, build_plan, node_container
from ddptui.core.job.spec import make_spec

NODES = [NodeTarget("node1", "10.0.0.1"), NodeTarget("node2", "10.0.0.2")]


def test_every_node_runs_the_manual_torchrun_line() -> None:
    spec = make_spec(
        backend="ssh",
        nodes=2,
        nproc_per_node=4,
        script="ddp.py",
        script_args=("5000000", "10"),
        hosts=("node1", "node2"),
    )
    plan = build_plan(spec, NODES, "run42", 29400)
    assert plan.rdzv_endpoint == "10.0.0.1:29400"
    assert plan.world_size == 8
    for node, command in zip(NODES, plan.commands, strict=True):
        assert list(command.argv) == [
            "torchrun",
            "--nnodes=2",
            "--nproc_per_node=4",
            "--rdzv_id=run42",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=10.0.0.1:29400",
            f"--local-addr={node.address}",
            "--tee=3",
            "ddp.py",
            "5000000",
            "10",
        ]
        assert command.env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == LINE_PREFIX_TEMPLATE
        assert command.env["PYTHONUNBUFFERED"] == "1"
    assert plan.commands[0].tag != plan.commands[1].tag


def test_user_env_overrides_and_ifname_is_set() -> None:
    spec = make_spec(script="x.py", env={"FOO": "a b", "LOGLEVEL": "DEBUG"}, socket_ifname="eth1")
    command = build_plan(spec, NODES, "r", 1).commands[0]
    assert command.env["FOO"] == "a b"
    assert command.env["LOGLEVEL"] == "DEBUG"
    assert command.env["GLOO_SOCKET_IFNAME"] == "eth1" == command.env["NCCL_SOCKET_IFNAME"]


def test_shell_line_quotes_everything_literally() -> None:
    nasty = "a b'c\";rm -rf /"
    spec = make_spec(
        script="my script.py", script_args=(nasty,), workdir="/data/my dir", env={"X": "$(whoami)"}
    )
    line = build_plan(spec, NODES, "r", 1).commands[0].shell_line()
    parts = shlex.split(line)
    assert parts[:3] == ["cd", "/data/my dir", "&&"]
    assert "X=$(whoami)" in parts
    assert parts[-2:] == ["my script.py", nasty]


def test_activation_step_and_container_wrapper() -> None:
    spec = make_spec(
        script="t.py",
        activate="conda activate pt",
        container={"image": "pytorch:latest", "engine": "podman", "mounts": ("/data:/data",)},
        workdir="/w",
    )
    command = build_plan(spec, NODES, "r", 1).commands[0]
    assert command.prelude == "conda activate pt"
    argv = list(command.argv)
    assert argv[:11] == [
        "podman", "run", "--rm", "--network=host", "--ipc=host", "--name", "ddptui-r.0",
        "-v", "/data:/data", "-v", "/w:/w",
    ]  # fmt: skip
    assert "pytorch:latest" in argv and argv[argv.index("pytorch:latest") + 1] == "torchrun"
    assert argv[argv.index("DDPTUI_TAG") - 1 : argv.index("DDPTUI_TAG") + 1] == ["-e", "DDPTUI_TAG"]
    assert "conda activate pt &&" in command.shell_line()


def test_max_restarts_is_passed() -> None:
    spec = make_spec(script="t.py", max_restarts=3)
    assert "--max-restarts=3" in build_plan(spec, NODES, "r", 1).commands[0].argv


def test_plan_round_trips_through_json() -> None:
    from ddptui.core.job.plan import LaunchPlan

    plan = build_plan(make_spec(script="t.py"), NODES, "r", 5)
    assert LaunchPlan.from_dict(plan.to_dict()) == plan


def test_container_of_a_shared_machine_and_a_script_outside_the_workdir() -> None:
    """Containers on one machine get the node's name on their own loopback address; an
    absolute script outside the working directory is mounted read-only where it is."""
    spec = make_spec(script="/opt/train/t.py", container={"image": "img"}, workdir="/w")
    nodes = [NodeTarget("local0", "127.0.0.2"), NodeTarget("local1", "127.0.0.3")]
    plan = build_plan(spec, nodes, "run.x", 1, container_hosts={"local1": "127.0.0.3"})
    first, second = (list(c.argv) for c in plan.commands)
    assert "--hostname" not in first
    i = second.index("--hostname")
    assert second[i : i + 4] == ["--hostname", "local1", "--add-host", "local1:127.0.0.3"]
    assert second[second.index("--name") + 1] == "ddptui-run.x.1"
    assert second[second.index("/opt/train:/opt/train:ro") - 1 :][:2] == [
        "-v",
        "/opt/train:/opt/train:ro",
    ]
    assert node_container(spec, "run.x.1") == ("podman", "ddptui-run.x.1")
    assert (
        node_container(make_spec(script="t", container={"image": "i", "engine": "pyxis"}), "t")
        is None
    )


def test_one_nodes_command_needs_only_its_own_address_and_the_first_nodes() -> None:
    """A host started as soon as it is reached (SSH) gets the command the whole plan gives
    it, though the other hosts' addresses are not known yet (placeholders here)."""
    spec = make_spec(backend="ssh", nodes=3, script="t.py", hosts=("a", "b", "c"))
    nodes = [NodeTarget("a", "10.0.0.1"), NodeTarget("b", "10.0.0.2"), NodeTarget("c", "10.0.0.3")]
    whole = build_plan(spec, nodes, "r", 29400)
    for index in range(3):
        known = [NodeTarget(n.name, n.name) for n in nodes]
        known[0], known[index] = nodes[0], nodes[index]
        alone = build_plan(spec, known, "r", 29400, only=index)
        assert alone.commands == (whole.commands[index],)
        assert alone.rdzv_endpoint == whole.rdzv_endpoint


def test_a_grace_beyond_torchruns_own_wait_is_given_to_the_agent() -> None:
    """An agent that gets the stop signal itself waits the job's grace before its SIGKILL;
    up to torchrun's own 30 s nothing is added (the operator's --env still decides)."""
    base = {"backend": "ssh", "nodes": 2, "script": "ddp.py", "hosts": ("node1", "node2")}
    long = build_plan(make_spec(**base, grace=70.5), NODES, "run42", 29400)
    assert {c.env["PET_SHUTDOWN_TIMEOUT"] for c in long.commands} == {"71"}
    short = build_plan(make_spec(**base, grace=10), NODES, "run42", 29400)
    assert all("PET_SHUTDOWN_TIMEOUT" not in c.env for c in short.commands)
    own = make_spec(**base, grace=70, env={"PET_SHUTDOWN_TIMEOUT": "5"})
    assert build_plan(own, NODES, "run42", 29400).commands[0].env["PET_SHUTDOWN_TIMEOUT"] == "5"
