"""Provides the job a run gets: the operator's fields over a profile over the defaults, checked.

The command line turns its flags into fields and the launch form picks a profile; both come
here, so a profile means the same job wherever it is chosen, and no argparse is involved.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from ddptui.core.job import rules
from ddptui.core.job.elastic import split_node_range
from ddptui.core.job.ft import FT_MAX_RESTARTS, FT_TRAINER
from ddptui.core.job.gpus import CUDA_VISIBLE, fit_default_shape, machine_gpus
from ddptui.core.job.profiles import (
    BUILTIN,
    DEFAULT_PROFILE,
    ProfileError,
    ProfileSet,
    ResolvedProfile,
    bundled_trainer,
    compose,
    load_profiles,
)
from ddptui.core.job.spec import (
    BACKENDS,
    JobSpec,
    SpecError,
    check_local_script,
    make_spec,
)
from ddptui.core.job.ssh_config import check_ssh_config


def resolve_job(
    given: Mapping[str, Any],
    profile: str | None = None,
    profiles: ProfileSet | None = None,
) -> JobSpec:
    """`given` (JobSpec fields the operator set) over `profile` over the built-in defaults."""
    cli = dict(given)
    resolved: ResolvedProfile | None = None
    base: dict[str, Any] = {}
    if profile:
        resolved = (profiles or load_profiles()).resolve(profile)
        base = dict(resolved.fields)
        if "script" in cli:
            base.pop("script_args", None)  # a script given here brings its own args
        else:
            resolved.require_script()
    fields = compose(base, cli)
    if base.get("secret_env") and cli.get("secret_env"):  # both lists count
        fields["secret_env"] = tuple(dict.fromkeys([*base["secret_env"], *cli["secret_env"]]))
    hosts = list(fields.get("hosts", ()))
    backend = fields.get("backend") or ("ssh" if hosts else "local")
    if "backend" not in cli and "hosts" in cli:
        backend = "ssh"  # hosts given here mean SSH
    if backend not in BACKENDS:
        raise SpecError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    nodes = cli.get("nodes", len(cli["hosts"]) if "hosts" in cli else fields.get("nodes"))
    ft_replicas = int(fields.get("ft_replicas") or 0)
    if ft_replicas and "nodes" not in cli:  # a torchft job: one node per replica group
        nodes = ft_replicas
    if nodes is None:
        nodes = len(hosts) or 2
    if (
        isinstance(nodes, str) and ":" in nodes
    ):  # MIN:MAX (job/elastic.py): nodes is MAX from here on
        fields = split_node_range({**fields, "nodes": nodes})
        nodes = fields["nodes"]
    spares = int(fields.get("spares") or 0)
    container = fields.get("container") or {}
    found = rules.problems(
        {
            "backend": backend,
            "nodes": nodes,
            "hosts": hosts,
            "spares": spares,
            "min_nodes": fields.get("min_nodes"),
            "max_restarts": fields.get("max_restarts"),
            "container_image": container.get("image"),
            "container_engine": container.get("engine"),
            "container_mounts": container.get("mounts"),
        }
    )
    if found:
        raise SpecError(found[0].message)
    kept = nodes + spares if isinstance(nodes, int) else len(hosts)
    fields.update(backend=backend, nodes=nodes, hosts=tuple(hosts[:kept]))
    fields.setdefault("profile", "cli" if "script" in cli else "local")
    fields.setdefault("script", bundled_trainer(FT_TRAINER if ft_replicas else "envcheck.py"))
    if ft_replicas and fields.get("max_restarts") is None:
        fields["max_restarts"] = FT_MAX_RESTARTS  # a lost group comes back and heals
    spec = with_script_from_here(make_spec(**fields))
    if not ft_replicas and _shape_is_default(cli, resolved):
        spec = fit_to_gpus(spec)
    check_job(spec)
    if resolved is not None and "script" not in cli and spec.backend == "local":
        try:
            check_local_script(spec)
        except SpecError as exc:
            raise ProfileError(f"{resolved.where('script')}: script: {exc}") from None
    return spec


def with_script_from_here(spec: JobSpec, here: str | None = None) -> JobSpec:
    """An SSH job's relative script, read from the directory ddptui runs in (`here`), as
    torchrun typed there would read it: the nodes' own command would start in each one's
    home. With --workdir it is read from there, as the nodes run in it; a container's
    script is the image's, read from its own directory; `~` is each node's home."""
    script = spec.script
    if spec.backend != "ssh" or spec.workdir or spec.container is not None:
        return spec
    if posixpath.isabs(script) or script.startswith("~"):
        return spec
    path = posixpath.normpath(posixpath.join(here or os.getcwd(), script))
    return spec.model_copy(update={"script": path})


def _shape_is_default(cli: Mapping[str, Any], resolved: ResolvedProfile | None) -> bool:
    """Neither the operator nor a profile of theirs chose the nodes or processes per node."""
    if "nodes" in cli or "nproc_per_node" in cli or "hosts" in cli:
        return False
    if resolved is None:
        return True
    built_in = all(BUILTIN in resolved.where(f) for f in ("nodes", "nproc_per_node"))
    return resolved.name == DEFAULT_PROFILE and built_in


def fit_to_gpus(
    spec: JobSpec, gpus: int | None = None, environ: Mapping[str, str] | None = None
) -> JobSpec:
    """A local job of the default shape, fitted to this machine's GPUs (`gpus`: as
    nvidia-smi counts them, asked when not given); other jobs are returned as they are."""
    if spec.backend != "local":
        return spec
    count = machine_gpus() if gpus is None else gpus
    fitted = fit_default_shape(spec, count, os.environ if environ is None else environ)
    if fitted is None:
        return spec
    env = {**spec.env, CUDA_VISIBLE: ""} if fitted.on_cpu else spec.env
    update = {"nodes": fitted.nodes, "nproc_per_node": fitted.nproc_per_node, "env": env}
    return spec.model_copy(update={**update, "shape_note": fitted.note})


def check_job(spec: JobSpec) -> None:
    """The rules the whole job must keep, and an ssh_config neither SSH engine can read:
    refused before anything starts."""
    container = spec.container
    found = rules.problems(
        {
            "backend": spec.backend,
            "nodes": spec.nodes,
            "hosts": spec.hosts or ("-",) * (spec.nodes + spec.spares),
            "spares": spec.spares,
            "min_nodes": spec.min_nodes,
            "max_restarts": spec.max_restarts,
            "workdir": spec.workdir,
            "slurm_mode": spec.slurm.mode,
            "container_image": container.image if container else None,
            "container_engine": container.engine if container else None,
        }
    )
    if found:
        raise SpecError(found[0].message)
    if spec.backend == "ssh":
        check_ssh_config(spec.ssh.config_file)


def spec_for_profile(name: str, profiles: ProfileSet | None = None) -> JobSpec:
    """The job a profile describes, exactly as `ddptui --profile NAME` would run it."""
    return resolve_job({}, name, profiles)
