"""Provides the GPU split of one machine among pseudo-nodes: a disjoint CUDA_VISIBLE_DEVICES each.

The local backend runs every pseudo-node as its own torchrun agent on one machine. Each agent
numbers its ranks from local rank 0, and scripts put local rank L on `cuda:L`, so without a
split every pseudo-node's rank 0 lands on GPU 0 and NCCL refuses the communicator ("Duplicate
GPU detected"). Pseudo-node i gets the devices [i * nproc, (i + 1) * nproc) of what the job
may see: the operator's own CUDA_VISIBLE_DEVICES (in --env, else the console's environment),
else every GPU of the machine. A job that needs more GPUs than that is refused before launch.

A job is a GPU job when the machine has GPUs and CUDA_VISIBLE_DEVICES does not hide them
(`--env CUDA_VISIBLE_DEVICES=` runs it on the CPU, with gloo, as the trainer scripts choose).

A job whose shape nobody chose (no --nodes, no --nproc-per-node, no profile of the operator's)
is fitted to the GPUs instead of refused (`fit_default_shape`): the first command a new user
types must run on the machine in front of them, 1 GPU or 8.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from ddptui.core.job.spec import JobSpec, SpecError

CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"
_HIDDEN = ("", "-1", "none", "NoDevFiles")  # values that hide every GPU from CUDA


def machine_gpus() -> int:
    """How many GPUs this machine has, as `nvidia-smi --list-gpus` counts them (the console
    never imports torch); 0 without nvidia-smi or when it fails (no working driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        done = subprocess.run(
            [smi, "--list-gpus"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if done.returncode != 0:
        return 0
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


def hides_gpus(value: str) -> bool:
    """True when CUDA_VISIBLE_DEVICES=value leaves CUDA no device (the job runs on CPU)."""
    return value.strip() in _HIDDEN


def visible_devices(
    spec: JobSpec, machine_gpus: int, environ: Mapping[str, str]
) -> tuple[list[str], str]:
    """The devices the job may use, and what gives them (`... gives it N` in messages)."""
    for where, env in (("--env", spec.env), ("this environment", environ)):
        if CUDA_VISIBLE in env:
            value = env[CUDA_VISIBLE]
            if hides_gpus(value):
                return [], f"{CUDA_VISIBLE}={value!r} ({where}) gives it"
            devices = [d.strip() for d in value.split(",") if d.strip()]
            return devices, f"{CUDA_VISIBLE}={value} ({where}) gives it"
    return [str(i) for i in range(machine_gpus)], "this machine has"


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else ("es" if noun.endswith("s") else "s"))


def split_gpus(
    spec: JobSpec, machine_gpus: int, environ: Mapping[str, str]
) -> tuple[str, ...] | None:
    """Each pseudo-node's CUDA_VISIBLE_DEVICES, or None when the job does not use GPUs (no GPU
    here, GPUs hidden, containers, or `gpu_split` off). Too few GPUs is a SpecError."""
    if machine_gpus <= 0 or not spec.gpu_split or spec.container is not None:
        return None
    devices, source = visible_devices(spec, machine_gpus, environ)
    if not devices:
        return None
    need = spec.nodes * spec.nproc_per_node
    if need > len(devices):
        fits = ", ".join(_fits(len(devices)))
        shape = f"{counted(spec.nodes, 'pseudo-node')} x {counted(spec.nproc_per_node, 'process')}"
        raise SpecError(
            f"the job needs {need} GPUs ({shape}), {source} {len(devices)}: use {fits}, "
            f"or run on the CPU with --env {CUDA_VISIBLE}="
        )
    per = spec.nproc_per_node
    return tuple(",".join(devices[i * per : (i + 1) * per]) for i in range(spec.nodes))


def _fits(gpus: int) -> list[str]:
    """Shapes that fit `gpus` GPUs, the widest node first."""
    return [f"--nodes {gpus // n} --nproc-per-node {n}" for n in (gpus, 1) if gpus // n >= 1][
        : 1 if gpus == 1 else 2
    ]


@dataclass(frozen=True)
class FittedShape:
    """The default job's shape on this machine, and the words that say so (a notice)."""

    nodes: int
    nproc_per_node: int
    on_cpu: bool  # one GPU: two pseudo-nodes cannot share it under NCCL, they run on gloo
    note: str


def fit_default_shape(
    spec: JobSpec, machine_gpus: int, environ: Mapping[str, str]
) -> FittedShape | None:
    """The shape of a default job (2 pseudo-nodes) that this machine's GPUs can run, or None
    when the job does not use GPUs (it then runs as it is, on the CPU).

    Two pseudo-nodes always, since the environment check is about a rendezvous between
    nodes; each process its own GPU: 1 GPU -> 2 x 1 on the CPU (gloo; NCCL refuses two ranks
    on one GPU), 2 or 3 -> 2 x 1, 4 -> 2 x 2, 8 -> 2 x 4 (every GPU takes part, so every one
    is checked: NCCL inside each pseudo-node and between them).
    """
    if machine_gpus <= 0 or not spec.gpu_split or spec.container is not None:
        return None
    devices, source = visible_devices(spec, machine_gpus, environ)
    if not devices:
        return None
    count = len(devices)
    has = f"{source} {counted(count, 'GPU')}"
    if count == 1:
        return FittedShape(
            2,
            1,
            True,
            f"{has}: the default job runs 2 pseudo-nodes x 1 process on the CPU (gloo); "
            "--nodes 1 --nproc-per-node 1 uses the GPU",
        )
    per = count // 2
    idle = f" (GPU {devices[-1]} stays free)" if count % 2 else ""
    return FittedShape(
        2,
        per,
        False,
        f"{has}: the default job runs 2 pseudo-nodes x {counted(per, 'process')}, "
        f"one GPU each{idle}",
    )
