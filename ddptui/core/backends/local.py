"""Provides the local backend: N pseudo-nodes as separate torchrun agents on this machine."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ddptui.core.backends.base import BackendError, Emit, HelperBackend, PortTaken
from ddptui.core.backends.transport import LocalTransport, Transport
from ddptui.core.events import AllocationChanged
from ddptui.core.job.gpus import CUDA_VISIBLE, machine_gpus, split_gpus
from ddptui.core.job.plan import LaunchPlan, NodeCommand, NodeTarget, build_plan
from ddptui.core.job.spec import JobSpec, SpecError, check_local_script
from ddptui.core.node.netinfo import port_report
from ddptui.core.node.reaper import TAG_VAR
from ddptui.core.runs.run_dir import RunDir, state_dir

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now; the OS picks it, so no fixed port can be taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def local_launcher(launcher: str) -> str:
    """`torchrun` of this interpreter's environment, so an un-activated venv still works."""
    if launcher != "torchrun":
        return launcher
    beside = Path(sys.executable).parent / "torchrun"
    if beside.exists():
        return str(beside)
    return shlex.join([sys.executable, "-m", "torch.distributed.run"])


def container_engine(spec: JobSpec) -> str | None:
    """podman/docker when the pseudo-nodes are containers (torch is then the image's)."""
    c = spec.container
    return c.engine if c is not None and c.engine != "pyxis" else None


def local_gpus(spec: JobSpec, environ: Mapping[str, str] | None = None) -> tuple[str, ...] | None:
    """Each pseudo-node's CUDA_VISIBLE_DEVICES (job/gpus.py), or None for a CPU job; a job
    that needs more GPUs than this machine gives it is a SpecError, before anything starts."""
    if spec.backend != "local" or spec.container is not None or not spec.gpu_split:
        return None
    return split_gpus(spec, machine_gpus(), os.environ if environ is None else environ)


def local_plan(
    spec: JobSpec,
    nodes: Sequence[NodeTarget],
    run_id: str,
    port: int,
    gpus: Sequence[str] | None = None,
) -> LaunchPlan:
    """This machine's plan: its own torchrun (or the image's, in containers), an absolute
    working directory, gloo on `lo`, and each pseudo-node's own GPUs (`gpus`, by node)."""
    contained = container_engine(spec) is not None
    spec = spec.model_copy(
        update={
            "launcher": spec.launcher if contained else local_launcher(spec.launcher),
            "workdir": str(Path(spec.workdir or Path.cwd()).resolve()),
        }
    )
    return build_plan(
        spec,
        nodes,
        run_id,
        port,
        socket_ifnames={n.name: "lo" for n in nodes},
        container_hosts={n.name: n.address for n in nodes} if contained else None,
        node_env={n.name: {CUDA_VISIBLE: g} for n, g in zip(nodes, gpus, strict=True)}
        if gpus
        else None,
        # torchft: the pseudo-nodes share one address, so each group serves its rendezvous
        # on a port of its own, and the Lighthouse on one the OS picks unless given
        group_ports={n.name: free_port() for n in nodes[1:]} if spec.ft_replicas else None,
        lighthouse_port=(spec.ft_lighthouse_port or free_port()) if spec.ft_replicas else None,
    )


class LocalBackend(HelperBackend):
    """Every pseudo-node is its own torchrun agent; they meet over c10d on 127.0.0.1."""

    name = "local"
    logs_written_locally = True

    def __init__(self, spec: JobSpec, run: RunDir, emit: Emit) -> None:
        super().__init__(spec, run, emit)
        self._transport = LocalTransport()
        self._gpus: tuple[str, ...] | None = None

    async def allocate(self) -> list[NodeTarget]:
        check_local_script(self.spec)
        engine = container_engine(self.spec)
        if engine and shutil.which(engine) is None:
            raise BackendError(f"{engine} is not installed here (--container-engine {engine})")
        if engine is None and self.spec.launcher == "torchrun" and not _has_torch():
            raise BackendError(
                "torch is not installed here; the local backend runs torchrun on this machine "
                "(pip install 'ddptui[node]')"
            )
        try:
            self._gpus = local_gpus(self.spec)
        except SpecError as exc:
            raise BackendError(str(exc)) from None
        nodes = self._nodes()
        where = "this machine"
        if self._gpus:
            where += ", GPUs " + " | ".join(self._gpus)
        self.emit(AllocationChanged("granted", None, tuple(n.name for n in nodes), where))
        return nodes

    async def reach(self) -> tuple[list[NodeTarget], dict[str, str]]:
        return self._nodes(), {}

    def _nodes(self) -> list[NodeTarget]:
        """Containers sharing this machine's network each run torchrun as PID 1: c10d tells
        agents apart by (--local-addr, PID), so each gets a loopback address of its own."""
        contained = container_engine(self.spec) is not None
        return [
            NodeTarget(f"local{i}", f"127.0.0.{i + 2}" if contained else LOOPBACK)
            for i in range(self.spec.nodes)
        ]

    def job_python(self) -> str:
        return sys.executable  # the local backend runs this interpreter's torchrun

    def program_argv(self, node: str, *args: str) -> list[str]:
        return [sys.executable, "-", *args]

    def runs_dir(self) -> str:
        return str(state_dir() / "runs")

    async def rdzv_port(self, head: NodeTarget) -> int:
        """The port the operator gave, if it can be bound here (else who holds it is said),
        or one the OS picks free."""
        if self.spec.rdzv_port is None:
            return free_port()
        report = port_report(LOOPBACK, self.spec.rdzv_port, TAG_VAR)
        if not report["free"]:
            raise PortTaken(head.name, report)
        return self.spec.rdzv_port

    def plan(self, nodes: Sequence[NodeTarget], port: int) -> LaunchPlan:
        return local_plan(self.spec, nodes, self.run.run_id, port, self._gpus)

    def python(self) -> str:
        return sys.executable

    def transport(self, node: str) -> Transport:
        return self._transport

    def node_log_path(self, command: NodeCommand) -> str:
        return str(self.run.node_log(command.index, command.node))
