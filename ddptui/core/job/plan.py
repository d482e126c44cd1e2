"""Provides LaunchPlan: the exact per-node commands and environment, as pure functions."""

from __future__ import annotations

import math
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddptui.core.job.elastic import nnodes_for
from ddptui.core.job.ft import LIGHTHOUSE_PORT, group_environment, with_lighthouse
from ddptui.core.job.secret_env import mask_env
from ddptui.core.job.spec import JobSpec

# torchrun prefixes every worker line with this (see --tee), so any script's output can be
# attributed to its global and local rank without the script's help.
LINE_PREFIX_TEMPLATE = "[ddptui:${rank}:${local_rank}]:"
TAG_VAR = "DDPTUI_TAG"
UNSHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"  # torch's opt-out of the shared store
DEFAULT_RDZV_PORT = 29400
# torchrun's own wait between the signal it passes to its workers and their SIGKILL; its
# --shutdown-timeout (PET_SHUTDOWN_TIMEOUT) sets it where the node's torch has one (2.9 on).
TORCHRUN_SHUTDOWN_S = 30


@dataclass(frozen=True)
class NodeTarget:
    """A node the job runs on: the name the operator knows and the address the others reach."""

    name: str
    address: str


@dataclass(frozen=True)
class NodeCommand:
    """What runs on one node: the command a person would type there, its environment and cwd."""

    node: str
    address: str
    index: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    prelude: str | None = None
    tag: str = ""
    secret_env: tuple[str, ...] = ()  # names secret beyond those recognised by name

    @property
    def shown_env(self) -> dict[str, str]:
        """The environment as it may be shown or saved (secret values masked)."""
        return mask_env(self.env, self.secret_env)

    def shell_line(self) -> str:
        """The command as one shell line, quoted so nothing in it is interpreted twice;
        secret values are masked (the line is for showing and saving, never for running)."""
        parts: list[str] = []
        if self.cwd:
            parts.append(f"cd {shlex.quote(self.cwd)}")
        if self.prelude:
            parts.append(self.prelude)
        shown = self.shown_env
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items()))
        command = shlex.join(self.argv)
        parts.append(f"{env} {command}" if env else command)
        return " && ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "address": self.address,
            "index": self.index,
            "argv": list(self.argv),
            "env": self.shown_env,
            "cwd": self.cwd,
            "prelude": self.prelude,
            "tag": self.tag,
            "secret_env": list(self.secret_env),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeCommand:
        return cls(
            node=data["node"],
            address=data["address"],
            index=data["index"],
            argv=tuple(data["argv"]),
            env=dict(data["env"]),
            cwd=data["cwd"],
            prelude=data.get("prelude"),
            tag=data.get("tag", ""),
            secret_env=tuple(data.get("secret_env", ())),
        )


@dataclass(frozen=True)
class LaunchPlan:
    run_id: str
    rdzv_endpoint: str
    nproc_per_node: int
    commands: tuple[NodeCommand, ...] = field(default_factory=tuple)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * len(self.commands)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(c.node for c in self.commands)

    def command_for(self, node: str) -> NodeCommand:
        for command in self.commands:
            if command.node == node:
                return command
        raise KeyError(node)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "rdzv_endpoint": self.rdzv_endpoint,
            "nproc_per_node": self.nproc_per_node,
            "commands": [c.to_dict() for c in self.commands],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchPlan:
        return cls(
            run_id=data["run_id"],
            rdzv_endpoint=data["rdzv_endpoint"],
            nproc_per_node=data["nproc_per_node"],
            commands=tuple(NodeCommand.from_dict(c) for c in data["commands"]),
        )


def torchrun_argv(
    spec: JobSpec,
    nnodes: int | str,
    rdzv_id: str,
    endpoint: str,
    local_addr: str | None,
    is_host: bool | None = None,
) -> list[str]:
    """The torchrun line of the manual procedure, plus --tee so worker lines carry their rank."""
    argv = [
        *shlex.split(spec.launcher),
        f"--nnodes={nnodes}",
        f"--nproc_per_node={spec.nproc_per_node}",
        f"--rdzv_id={rdzv_id}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={endpoint}",
    ]
    if local_addr:
        argv.append(f"--local-addr={local_addr}")
    if spec.max_restarts:
        argv.append(f"--max-restarts={spec.max_restarts}")
    conf = [spec.rdzv_conf] if spec.rdzv_conf else []
    if is_host is not None:  # pseudo-nodes share one address: say which serves the store
        conf.append(f"is_host={str(is_host).lower()}")
    if conf:
        argv.append(f"--rdzv_conf={','.join(conf)}")
    argv += ["--tee=3", spec.script, *spec.script_args]
    return argv


def node_environment(spec: JobSpec, socket_ifname: str | None) -> dict[str, str]:
    """What every node needs beyond the operator's --env: unbuffered output, rank prefixes,
    the agent's rendezvous log lines, and the interface gloo/NCCL should use."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "LOGLEVEL": "INFO",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": LINE_PREFIX_TEMPLATE,
    }
    ifname = spec.socket_ifname or socket_ifname
    if ifname:
        env["GLOO_SOCKET_IFNAME"] = ifname
        env["NCCL_SOCKET_IFNAME"] = ifname
    if spec.grace > TORCHRUN_SHUTDOWN_S:
        # An agent that gets the stop signal itself (Slurm signals every process of a step)
        # passes it on and gives its workers the job's grace, not its own 30 s. Every torchrun
        # flag reads a PET_ variable: a torch without this flag (before 2.9) ignores it.
        env["PET_SHUTDOWN_TIMEOUT"] = str(math.ceil(spec.grace))
    env.update(spec.env)
    return env


def container_name(tag: str) -> str:
    """The node's container: named after the job's tag, so teardown finds it by name."""
    return "ddptui-" + re.sub(r"[^A-Za-z0-9_.@-]", "_", tag)  # @: a batch script's placeholder


def node_container(spec: JobSpec, tag: str) -> tuple[str, str] | None:
    """(engine, container name) when the node's command runs in a podman/docker container
    that teardown must remove; None otherwise (no container, or pyxis: Slurm owns it)."""
    if spec.container is None or spec.container.engine == "pyxis":
        return None
    return spec.container.engine, container_name(tag)


def container_argv(
    spec: JobSpec,
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | None,
    tag: str,
    host: tuple[str, str] | None = None,
) -> list[str]:
    """Wrap argv in `podman|docker run --network=host --ipc=host ...` as the AMD procedure does.

    The container is named after the tag and gets the tag in its environment, so teardown
    finds its processes from the host and removes the container even when the `run` client
    is gone (conmon keeps a container whose client was killed). The working directory and
    the script's own directory are mounted at the same paths. `host` (name, address) is for
    containers that share one machine's network: c10d tells agents apart by the host's name
    (as its address resolves back) and PID, and every container's torchrun is PID 1, so each
    gets its own name on its own loopback address.
    """
    assert spec.container is not None
    c = spec.container
    wrapped = [c.engine, "run", "--rm", "--network=host", "--ipc=host"]
    wrapped += ["--name", container_name(tag)]
    if host:
        wrapped += ["--hostname", host[0], "--add-host", f"{host[0]}:{host[1]}"]
    for mount in c.mounts:
        wrapped += ["-v", mount]
    if cwd:
        wrapped += ["-v", f"{cwd}:{cwd}", "-w", cwd]
    script_dir = posixpath.dirname(spec.script)
    if posixpath.isabs(spec.script) and not (
        cwd and (script_dir + "/").startswith(cwd.rstrip("/") + "/")
    ):
        wrapped += ["-v", f"{script_dir}:{script_dir}:ro"]
    for name in sorted({**env, TAG_VAR: tag}):
        wrapped += ["-e", name]
    wrapped += [*c.extra_args, c.image, *argv]
    return wrapped


def build_plan(
    spec: JobSpec,
    nodes: Sequence[NodeTarget],
    run_id: str,
    rdzv_port: int,
    *,
    local_addrs: bool = True,
    socket_ifnames: Mapping[str, str] | None = None,
    container_hosts: Mapping[str, str] | None = None,
    node_env: Mapping[str, Mapping[str, str]] | None = None,
    only: int | None = None,
    group_ports: Mapping[str, int] | None = None,
    lighthouse_port: int | None = None,
) -> LaunchPlan:
    """Every node runs the same torchrun line; the first node hosts the c10d rendezvous.

    `local_addrs` passes each node's own address as --local-addr so MASTER_ADDR is an IP and
    never depends on DNS (a node that cannot resolve rank 0's hostname retries forever).
    `container_hosts` (node -> loopback address) gives each node's container the node's name
    as its hostname, resolving to that address (containers sharing one machine's network).
    `node_env` (node -> variables) adds what differs between nodes (a pseudo-node's GPUs).
    `only` (an index): the plan holds that node's command alone (a node started as soon as
    it is reached, before the others' addresses are known: its command needs only its own
    address and the first node's).
    A torchft job's replica group serves its own rendezvous on its node, at `rdzv_port` or
    its `group_ports` entry (pseudo-nodes sharing one address need one each); the
    Lighthouse listens on the first node at `lighthouse_port` (default: the job's).
    """
    head = nodes[0].address
    endpoint = f"{head}:{rdzv_port}"
    spares = spec.spares if len(nodes) > spec.nodes else 0
    nnodes = nnodes_for(spec, len(nodes) - spares)
    commands = []
    for index, node in enumerate(nodes):
        if only is not None and index != only:
            continue
        tag = f"{run_id}.{index}"
        ifname = (socket_ifnames or {}).get(node.name)
        env = node_environment(spec, ifname)
        env.update((node_env or {}).get(node.name, {}))
        # An elastic job's rendezvous store must live on the first node, whose address is
        # the endpoint: c10d lets whichever agent binds first serve it (pseudo-nodes share
        # one address), and losing the node that serves it ends the job.
        elastic = ":" in nnodes
        is_host = (index == 0) if elastic else None
        if elastic or spec.spares:
            # torch shares the rendezvous's TCPStore with the workers and writes a round's
            # MASTER_ADDR only on an agent's first rendezvous (dynamic_rendezvous: the
            # bootstrap info is kept): a node that joins a later round (a spare, a node back)
            # waits for it until it times out (60 s), and the round's other agents with it.
            env.setdefault(UNSHARED_STORE, "1")
        address = node.address if local_addrs else None
        if spec.ft_replicas:  # a replica group: its own rendezvous on its own node
            lighthouse = lighthouse_port or spec.ft_lighthouse_port or LIGHTHOUSE_PORT
            env.update(group_environment(spec, index, head, lighthouse))
            group = f"{node.address}:{(group_ports or {}).get(node.name, rdzv_port)}"
            argv = torchrun_argv(spec, 1, f"{run_id}.g{index}", group, address)
            if index == 0:
                argv = with_lighthouse(spec, argv, lighthouse)
        else:
            argv = torchrun_argv(spec, nnodes, run_id, endpoint, address, is_host)
        if spec.container and spec.container.engine != "pyxis":
            host = None
            if container_hosts and node.name in container_hosts:
                host = (node.name, container_hosts[node.name])
            argv = container_argv(spec, argv, env, spec.workdir, tag, host)
        commands.append(
            NodeCommand(
                node=node.name,
                address=node.address,
                index=index,
                argv=tuple(argv),
                env=env,
                cwd=spec.workdir,
                prelude=spec.activate,
                tag=tag,
                secret_env=spec.secret_env,
            )
        )
    return LaunchPlan(run_id, endpoint, spec.nproc_per_node, tuple(commands))
