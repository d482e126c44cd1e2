"""Provides the Slurm command lines of a job as pure functions: salloc, the srun steps, the
node helper steps, and the sbatch script written the way the manual procedures write it."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from ddptui.core.job.plan import (
    LaunchPlan,
    NodeCommand,
    NodeTarget,
    build_plan,
    container_argv,
    node_container,
    node_environment,
    torchrun_argv,
)
from ddptui.core.job.spec import JobSpec, SpecError

JOB_PREFIX = "ddptui"
STEP_LOG = "step.log"  # srun direct: one step, one labelled stream, demuxed per node
_HEAD = "@HEAD_ADDR@"
_SELF = "@NODE_ADDR@"
_INDEX = "@NODE_INDEX@"
_RUN_DIR = "@RUN_DIR@"
HELPER_FILE = "job_helper.py"  # beside job.sbatch: the node helper the job's last step runs
PROOF_SUFFIX = ".proof"  # nodes/NNN-NODE.proof: that node's reap report, from the job itself
PROOF_GRACE_S = 3


def job_name(run_id: str) -> str:
    return f"{JOB_PREFIX}-{run_id}"


def step_name(run_id: str, index: int | None = None) -> str:
    """torchrun steps are named per node (`ddptui-RUN-0`); the srun-direct step `ddptui-RUN`."""
    return job_name(run_id) if index is None else f"{job_name(run_id)}-{index}"


def direct_tag(run_id: str) -> str:
    return f"{run_id}.step"


def resolve_mode(spec: JobSpec, environ: Mapping[str, str] | None = None) -> str:
    """auto: the allocation we are inside if there is one, else a new one with salloc."""
    env = os.environ if environ is None else environ
    mode = spec.slurm.mode
    if mode == "auto":
        return "existing" if env.get("SLURM_JOB_ID") else "salloc"
    if mode == "existing" and not env.get("SLURM_JOB_ID"):
        raise SpecError(
            "--slurm-mode existing needs an allocation: run inside salloc/sbatch "
            "(SLURM_JOB_ID is not set)"
        )
    return mode


def allocation_args(spec: JobSpec) -> list[str]:
    """What salloc and sbatch both ask for. torchrun: one task per node with a CPU per
    worker; srun direct: one task per process. `--slurm-arg`s come last, so they win."""
    s = spec.slurm
    args = [f"--nodes={spec.nodes}"]
    if s.launch == "srun":
        args.append(f"--ntasks-per-node={spec.nproc_per_node}")
    else:
        args += ["--ntasks-per-node=1", f"--cpus-per-task={spec.nproc_per_node}"]
    for flag, value in (
        ("partition", s.partition),
        ("time", s.time),
        ("gres", s.gres),
        ("account", s.account),
    ):
        if value:
            args.append(f"--{flag}={value}")
    if s.exclusive:
        args.append("--exclusive")
    return [*args, *s.extra_args]


def salloc_argv(spec: JobSpec, run_id: str) -> list[str]:
    return ["salloc", "--no-shell", f"--job-name={job_name(run_id)}", *allocation_args(spec)]


def container_flags(spec: JobSpec, cwd: str | None) -> list[str]:
    """pyxis/enroot flags for srun; podman/docker wrap torchrun itself (see plan.py)."""
    c = spec.container
    if c is None or c.engine != "pyxis":
        return []
    flags = [f"--container-image={c.image}"]
    if c.mounts:
        flags.append(f"--container-mounts={','.join(c.mounts)}")
    if cwd:
        flags.append(f"--container-workdir={cwd}")
    return [*flags, *c.extra_args]


def on_node(argv: Sequence[str], prelude: str | None) -> list[str]:
    """Run the activation step (conda, venv) on the node, in the same shell as the command."""
    if not prelude:
        return list(argv)
    return ["bash", "-c", f'{prelude} && exec "$@"', "ddptui-node", *argv]


def torchrun_step_argv(
    spec: JobSpec,
    job_id: str,
    run_id: str,
    index: int,
    node: str,
    cpus: int,
    cwd: str,
    inner: Sequence[str],
) -> list[str]:
    """One step per node: one stream per node, and --local-addr can differ per node."""
    argv = [
        "srun",
        f"--jobid={job_id}",
        "--nodes=1",
        "--ntasks=1",
        "--ntasks-per-node=1",
        f"--nodelist={node}",
        f"--job-name={step_name(run_id, index)}",
        "--export=ALL",
        f"--chdir={cwd}",
    ]
    if cpus:
        argv.append(f"--cpus-per-task={cpus}")
    return [*argv, *container_flags(spec, cwd), *on_node(inner, spec.activate)]


def direct_argv(spec: JobSpec) -> list[str]:
    """srun direct: the script itself, once per task; it reads SLURM_PROCID and friends."""
    if spec.container and spec.container.engine != "pyxis":
        raise SpecError("srun direct runs containers through pyxis: use --container-engine pyxis")
    return [*shlex.split(spec.python), "-u", spec.script, *spec.script_args]


def direct_step_argv(
    spec: JobSpec, job_id: str, run_id: str, nodes: Sequence[str], cwd: str
) -> list[str]:
    """One step for all nodes, `-l` labels every line with its task (= global rank)."""
    g = spec.nproc_per_node
    argv = [
        "srun",
        f"--jobid={job_id}",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes) * g}",
        f"--ntasks-per-node={g}",
        f"--nodelist={','.join(nodes)}",
        "--distribution=block",
        "--kill-on-bad-exit=1",
        "--label",
        f"--job-name={step_name(run_id)}",
        "--export=ALL",
        f"--chdir={cwd}",
    ]
    return [*argv, *container_flags(spec, cwd), *on_node(direct_argv(spec), spec.activate)]


def direct_environment(
    spec: JobSpec, master: NodeTarget, port: int, socket_ifname: str | None
) -> dict[str, str]:
    """What srun direct's tasks need: where rank 0 listens (an address, never a name)."""
    env = {"MASTER_ADDR": master.address, "MASTER_PORT": str(port)}
    env.update(_direct_env(spec, socket_ifname))
    return env


def _direct_env(spec: JobSpec, socket_ifname: str | None) -> dict[str, str]:
    """node_environment without what only torchrun's agent reads."""
    env = node_environment(spec, socket_ifname)
    for name in ("LOGLEVEL", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"):
        if name not in spec.env:
            env.pop(name, None)
    return env


def helper_argv(
    job_id: str | None,
    node: str,
    name: str,
    python: str,
    verb: str,
    *args: str,
    extra: Sequence[str] = (),
) -> list[str]:
    """The node shim on one node: inside the allocation (--overlap, so it never waits for
    the job's own steps), or as a tiny job of its own when there is no allocation left."""
    argv = [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        f"--job-name={name}",
        "--export=ALL",
    ]
    if job_id:
        argv[1:1] = [f"--jobid={job_id}", "--overlap"]
    return [*argv, *extra, *shlex.split(python), "-", verb, *args]


def torchrun_plan(
    spec: JobSpec,
    run_id: str,
    nodes: Sequence[NodeTarget],
    port: int,
    job_id: str | None,
    cwd: str,
    cpus: int,
    ifnames: Mapping[str, str],
) -> LaunchPlan:
    """Every node's torchrun line; with a job id, wrapped in that node's own srun step
    (the activation step and the working directory then belong to the node side)."""
    if job_id is None:
        return build_plan(spec, nodes, run_id, port)
    base = build_plan(
        spec.model_copy(update={"workdir": cwd, "activate": None}),
        nodes,
        run_id,
        port,
        socket_ifnames=ifnames,
    )
    commands = tuple(
        NodeCommand(
            c.node,
            c.address,
            c.index,
            tuple(torchrun_step_argv(spec, job_id, run_id, c.index, c.node, cpus, cwd, c.argv)),
            c.env,
            None,
            None,
            c.tag,
            c.secret_env,
        )
        for c in base.commands
    )
    return LaunchPlan(run_id, base.rdzv_endpoint, base.nproc_per_node, commands)


def direct_plan(
    spec: JobSpec,
    run_id: str,
    nodes: Sequence[NodeTarget],
    port: int,
    job_id: str | None,
    cwd: str,
    socket_ifname: str | None,
) -> LaunchPlan:
    """srun direct: one step for all nodes, so every node shows the same command."""
    env = direct_environment(spec, nodes[0], port, socket_ifname)
    argv: list[str]
    if job_id is None:
        argv, workdir, prelude = direct_argv(spec), spec.workdir, spec.activate
    else:
        argv = direct_step_argv(spec, job_id, run_id, [n.name for n in nodes], cwd)
        workdir, prelude = None, None
    commands = tuple(
        NodeCommand(
            n.name,
            n.address,
            i,
            tuple(argv),
            env,
            workdir,
            prelude,
            direct_tag(run_id),
            spec.secret_env,
        )
        for i, n in enumerate(nodes)
    )
    return LaunchPlan(run_id, f"{nodes[0].address}:{port}", spec.nproc_per_node, commands)


# -- sbatch ---------------------------------------------------------------------------------------


SECRET_FILE = "secret.env"  # beside job.sbatch, mode 0600: the secret values it sources


def _sh_env(env: Mapping[str, str], indent: str, secret: frozenset[str] = frozenset()) -> list[str]:
    """`export` lines for the script; secret values are not written in it (see secret_file)."""
    return [
        f"{indent}export {k}={shlex.quote(v)}" for k, v in sorted(env.items()) if k not in secret
    ]


def secret_file(spec: JobSpec) -> str | None:
    """The secret part of the job's environment, for a private file the batch script sources
    (None when the job has no secret)."""
    secret = spec.secrets
    if not secret:
        return None
    return "".join(f"export {k}={shlex.quote(spec.env[k])}\n" for k in sorted(secret))


def _sbatch_path_option(flag: str, path: str) -> str:
    """`#SBATCH --flag=PATH`, quoted so a space does not cut it; a newline cannot be written."""
    if "\n" in path or "\r" in path:
        raise SpecError(f"{flag} path {path!r} contains a line break: choose a path without one")
    return f"#SBATCH {shlex.quote(f'--{flag}={path}')}"


def _render(argv: Sequence[str]) -> str:
    """shlex.join, with the placeholders turned into the script's shell variables."""
    line = shlex.join(argv)
    return (
        line.replace(_HEAD, "${head_addr}")
        .replace(_SELF, "${addr}")
        .replace(_INDEX, "${SLURM_NODEID}")
        .replace(_RUN_DIR, '"$run_dir"')
    )


def batch_script(spec: JobSpec, run_id: str, run_dir: str, port: int) -> str:
    """The batch script of the seed procedure: the first host of the allocation is the
    rendezvous head, then `srun torchrun ...` (or srun of the script itself).

    Each node writes its own log into the run dir, and its exit code beside it, so the
    console follows every node separately and loses nothing when it is not running.
    """
    cwd = spec.workdir or "."
    out = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name(run_id)}",
        *[f"#SBATCH {shlex.quote(a)}" for a in allocation_args(spec)],
        _sbatch_path_option("output", f"{run_dir}/slurm-%j.out"),
    ]
    if spec.workdir:
        out.append(_sbatch_path_option("chdir", spec.workdir))
    out += [
        "#",
        f"# Generated by ddptui for run {run_id}. {run_dir} must be on a filesystem that every",
        "# node shares: each node writes its log there (nodes/NNN-NODE.log, then .exit).",
        "",
        "umask 077  # every file of the run is private to its owner",
        f"run_dir={shlex.quote(run_dir)}",
        *(
            [f'set -a; . "$run_dir/{SECRET_FILE}"; set +a  # secret values, mode 0600']
            if spec.secrets
            else []
        ),
        "node_addr() { scontrol show node \"$1\" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2; }",
        'nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'head_node=$(echo "$nodes" | head -n 1)',
        'head_addr=$(node_addr "$head_node")',
        'node_addrs=$(for n in $nodes; do node_addr "$n"; done | xargs)',
        f'echo "ddptui: rendezvous on $head_node at $head_addr:{port}"',
        "",
        "# the interface holding an address, for GLOO/NCCL_SOCKET_IFNAME",
        'ifname_of() { ip -o -4 addr show 2>/dev/null | awk -v a="$1" '
        "'{split($4, p, \"/\")} p[1] == a {print $2; exit}'; }",
        "",
    ]
    if spec.slurm.launch == "srun":
        out += _direct_body(spec, run_id, cwd, port)
    else:
        out += _torchrun_body(spec, run_id, cwd, port)
    out += _proof_step(spec, run_id)
    return "\n".join(out) + "\n"


def _proof_step(spec: JobSpec, run_id: str) -> list[str]:
    """The job's own last step: on every node, ddptui's node helper stops whatever of the
    job is left (orphaned workers, a container kept by conmon) and writes what it found,
    inside the allocation, before Slurm releases it. No new job is needed to prove it."""
    tag = direct_tag(run_id) if spec.slurm.launch == "srun" else f"{run_id}.{_INDEX}"
    container = node_container(spec, tag)
    reap = [*shlex.split(spec.python), f"{_RUN_DIR}/{HELPER_FILE}", "reap", tag]
    reap += [str(PROOF_GRACE_S), *(container or ())]
    return [
        "",
        "# the last step: prove every node clean inside this allocation (nodes/NNN-NODE.proof)",
        "prove_node() {",
        "    local out",
        f"    out=$(printf '%s/nodes/%03d-%s{PROOF_SUFFIX}' "
        '"$run_dir" "$SLURM_NODEID" "$SLURMD_NODENAME")',
        f'    {_render(reap)} >"$out.tmp" && mv "$out.tmp" "$out"',
        "}",
        "export -f prove_node",
        f"env -u DDPTUI_TAG srun --ntasks-per-node=1 --kill-on-bad-exit=0 "
        f"--job-name={proof_step_name(run_id)} bash -c prove_node",
    ]


def proof_step_name(run_id: str) -> str:
    return f"{job_name(run_id)}-proof"


def _ifname_lines(spec: JobSpec, addr_var: str, indent: str) -> list[str]:
    if spec.socket_ifname:
        return []
    return [
        f'{indent}ifname=$(ifname_of "${addr_var}")',
        f'{indent}if [ -n "$ifname" ]; then '
        "export GLOO_SOCKET_IFNAME=$ifname NCCL_SOCKET_IFNAME=$ifname; fi",
    ]


def _torchrun_body(spec: JobSpec, run_id: str, cwd: str, port: int) -> list[str]:
    inner = torchrun_argv(spec, spec.nodes, run_id, f"{_HEAD}:{port}", _SELF)
    if node_container(spec, run_id) is not None:  # podman/docker: torchrun in it, per node
        names = {**node_environment(spec, None), "GLOO_SOCKET_IFNAME": "", "NCCL_SOCKET_IFNAME": ""}
        inner = container_argv(spec, inner, names, spec.workdir, f"{run_id}.{_INDEX}")
    srun = [
        "srun",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        f"--job-name={step_name(run_id)}",
        *container_flags(spec, spec.workdir),
    ]
    command = _render(on_node(inner, spec.activate))
    return [
        "run_node() {",
        "    local addr log",
        '    addr=$(echo "$node_addrs" | cut -d" " -f$((SLURM_NODEID + 1)))',
        '    log=$(printf \'%s/nodes/%03d-%s.log\' "$run_dir" "$SLURM_NODEID" "$SLURMD_NODENAME")',
        *_ifname_lines(spec, "addr", "    "),
        *_sh_env(node_environment(spec, None), "    ", spec.secrets),
        f'    export DDPTUI_TAG="{run_id}.$SLURM_NODEID"',
        f'    {command} >"$log" 2>&1',
        '    echo $? >"$log.exit.tmp" && mv "$log.exit.tmp" "$log.exit"',
        "}",
        "export -f run_node ifname_of",
        "export run_dir head_addr node_addrs",
        f"cd {shlex.quote(cwd)}",
        f"{shlex.join(srun)} bash -c run_node",
    ]


def _direct_body(spec: JobSpec, run_id: str, cwd: str, port: int) -> list[str]:
    srun = [
        "srun",
        f"--ntasks-per-node={spec.nproc_per_node}",
        "--distribution=block",
        "--kill-on-bad-exit=1",
        "--label",
        f"--job-name={step_name(run_id)}",
        *container_flags(spec, spec.workdir),
    ]
    command = shlex.join([*srun, *on_node(direct_argv(spec), spec.activate)])
    return [
        *_ifname_lines(spec, "head_addr", ""),
        *_sh_env(_direct_env(spec, None), "", spec.secrets),
        f"export MASTER_ADDR=$head_addr MASTER_PORT={port}",
        f"log=$run_dir/{STEP_LOG}",
        f"cd {shlex.quote(cwd)}",
        f'DDPTUI_TAG={direct_tag(run_id)} {command} >"$log" 2>&1',
        'echo $? >"$log.exit.tmp" && mv "$log.exit.tmp" "$log.exit"',
    ]
