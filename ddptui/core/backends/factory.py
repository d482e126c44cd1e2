"""Provides the factory that picks a backend (local, ssh, slurm) for a job, and the plan a
job would run, before any node is allocated."""

from __future__ import annotations

import importlib

from ddptui.core.backends.base import Backend, BackendError, Emit
from ddptui.core.job.plan import LaunchPlan, NodeTarget, build_plan
from ddptui.core.job.spec import JobSpec, SpecError
from ddptui.core.runs.run_dir import RunDir

_BACKENDS = {
    "local": "ddptui.core.backends.local:LocalBackend",
    "ssh": "ddptui.core.backends.ssh.backend:SshBackend",
    "slurm": "ddptui.core.backends.slurm.backend:SlurmBackend",
}


def make_backend(spec: JobSpec, run: RunDir, emit: Emit) -> Backend:
    """Import only the chosen backend, so a site without SSH or Slurm pays nothing for them."""
    try:
        module_name, class_name = _BACKENDS[spec.backend].split(":")
        module = importlib.import_module(module_name)
    except (KeyError, ModuleNotFoundError) as exc:
        raise BackendError(f"backend {spec.backend!r} is not available: {exc}") from None
    backend: Backend = getattr(module, class_name)(spec, run, emit)
    return backend


def placeholder_nodes(spec: JobSpec) -> list[NodeTarget]:
    """The nodes as far as they are known before allocation."""
    if spec.backend == "local":
        return [NodeTarget(f"local{i}", "127.0.0.1") for i in range(spec.nodes)]
    if spec.hosts:
        return [NodeTarget(host, host) for host in spec.hosts[: spec.nodes]]
    return [NodeTarget(f"<node{i}>", f"<node{i}>") for i in range(spec.nodes)]


def preview_plan(spec: JobSpec, run_id: str, port: int) -> LaunchPlan:
    """The plan the chosen backend would build, on the nodes known before allocation, without
    allocating or connecting.

    The local backend rewrites the launcher and working directory, so its own rules apply;
    the others launch the generic plan.
    """
    nodes = placeholder_nodes(spec)
    if spec.backend == "local":
        from ddptui.core.backends.local import local_gpus, local_plan

        try:
            gpus = local_gpus(spec)
        except SpecError:
            gpus = None  # the launch refuses it, with the counts
        return local_plan(spec, nodes, run_id, port, gpus)
    return build_plan(spec, nodes, run_id, port)
