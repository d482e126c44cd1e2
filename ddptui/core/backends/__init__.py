"""Provides the backends (local, ssh, slurm) and the factory that picks one for a job."""

from __future__ import annotations

import importlib

from ddptui.core.backends.base import Backend, BackendError, Emit
from ddptui.core.job.spec import JobSpec
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
