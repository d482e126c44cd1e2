"""Provides the job's cross-field rules: what no single field shows, decided in one place.

The command line and the launch form both ask `problems` of the same fields; each says a
problem its own way (the command line names the flag, the form writes beside the field).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobProblem:
    """One rule the job breaks: the field to fix, the command line's sentence, the form's note."""

    field: str
    message: str
    note: str


def problems(fields: Mapping[str, Any]) -> list[JobProblem]:
    """Every cross-field rule `fields` break, in the order an operator would fix them.

    `fields` uses the launch form's flat names: backend, nodes, min_nodes, spares, max_restarts,
    hosts,
    workdir, slurm_mode, container_image, container_engine, container_mounts (absent or None:
    not given).
    """
    found: list[JobProblem] = []
    backend = fields.get("backend") or "local"
    hosts: Sequence[str] = fields.get("hosts") or ()
    nodes = fields.get("nodes")
    spares = int(fields.get("spares") or 0)
    if backend == "ssh" and not hosts:
        found.append(
            JobProblem(
                "hosts",
                "the ssh backend needs --hosts or --hostfile (or hosts in the profile)",
                "required for SSH: a,b or node[01-04]",
            )
        )
    elif backend == "ssh" and isinstance(nodes, int) and nodes > len(hosts):
        found.append(
            JobProblem(
                "nodes",
                f"--nodes {nodes} but only {len(hosts)} host(s) given",
                f"only {len(hosts)} host(s) listed",
            )
        )
    elif backend == "ssh" and isinstance(nodes, int) and nodes + spares > len(hosts):
        found.append(
            JobProblem(
                "spares",
                f"--nodes {nodes} and --spares {spares} need {nodes + spares} hosts, "
                f"{len(hosts)} given",
                f"{len(hosts)} host(s) listed: {len(hosts) - nodes} spare(s) at most",
            )
        )
    if spares and backend != "ssh":
        found.append(
            JobProblem(
                "spares",
                f"--spares start extra hosts over SSH: use it with --backend ssh, not {backend}",
                "spare hosts are SSH hosts",
            )
        )
    elif spares and not fields.get("min_nodes") and not fields.get("max_restarts"):
        found.append(
            JobProblem(
                "spares",
                "--spares replace a lost node in the agents' next round: give --nodes MIN:MAX "
                "or --max-restarts N",
                "needs nodes MIN:MAX or max restarts",
            )
        )
    image, engine = fields.get("container_image"), fields.get("container_engine")
    mounts = fields.get("container_mounts") or ()
    if not image and (engine or mounts):
        given = "--container-engine" if engine else "--container-mount"
        found.append(
            JobProblem(
                "container_image",
                f"{given} needs --container-image IMAGE (the image to run torchrun in)",
                "required when an engine or mounts are given",
            )
        )
    if engine == "pyxis" and backend != "slurm":
        found.append(
            JobProblem(
                "container_engine",
                f"--container-engine pyxis runs containers through srun: use it with --backend "
                f"slurm, or podman/docker with --backend {backend}",
                "pyxis runs containers through srun: slurm backend only",
            )
        )
    workdir = fields.get("workdir") or ""
    if (
        backend == "slurm"
        and fields.get("slurm_mode") == "sbatch"
        and ("\n" in workdir or "\r" in workdir)
    ):
        found.append(
            JobProblem(
                "workdir",
                f"--workdir {workdir!r} has a line break: a batch script cannot hold it",
                "has a line break: a batch script cannot hold it",
            )
        )
    return found
