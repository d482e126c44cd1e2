"""Provides the Slurm command lines of a job as pure functions: salloc, the srun steps and the
node helper steps. The sbatch script is in batch_script.py."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence

from ddptui.core.job.plan import (
    LaunchPlan,
    NodeCommand,
    NodeTarget,
    build_plan,
    node_environment,
)
from ddptui.core.job.spec import JobSpec, SpecError
from ddptui.core.node import STDIN_PROGRAM, STEP_SHELL

JOB_PREFIX = "ddptui"
STEP_LOG = "step.log"  # srun direct: one step, one labelled stream, demuxed per node


def job_name(run_id: str) -> str:
    return f"{JOB_PREFIX}-{run_id}"


def step_name(run_id: str, index: int | None = None) -> str:
    """The one step that runs every node (`ddptui-RUN`); a node's own step (`ddptui-RUN-0`),
    the line shown for the node in the plan, as a person would start it alone."""
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
        ("signal", s.signal),
    ):
        if value:
            args.append(f"--{flag}={value}")
    if s.exclusive:
        args.append("--exclusive")
    return [*args, *keep_on_node_failure(spec), *s.extra_args]


def keep_on_node_failure(spec: JobSpec) -> list[str]:
    """An elastic job goes on without a node it loses: Slurm must not end the job (nor its
    step) when it tells a node down, as it does by default. Not a batch job's: srun's word
    on the lost node goes to the job's own output there, which the console reads only once
    the job has ended, so no one would tell the others to go on without it."""
    elastic = spec.min_nodes is not None and spec.slurm.mode != "sbatch"
    return ["--no-kill"] if elastic else []


def slurm_signal_name(spec: JobSpec) -> str | None:
    """The signal of `--slurm-signal` (`B:USR1@120` -> USR1), None without one."""
    if not spec.slurm.signal:
        return None
    name = spec.slurm.signal.rpartition(":")[2].partition("@")[0].upper()
    return name.removeprefix("SIG")


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
    """A node's own step (as the plan shows it, and as by hand): one stream per node, and
    --local-addr can differ per node. The launch runs every node in one step instead."""
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


def nodes_step_argv(
    spec: JobSpec, job_id: str, run_id: str, nodes: Sequence[str], cpus: int, cwd: str
) -> list[str]:
    """One step for every node's torchrun (node/step.py): a task per node, each running
    node/step_task.sh (a shell program in srun's environment, else on every task's stdin),
    which picks its node's line;
    `--label` lets the console's side split the stream back into one log per node."""
    argv = [
        "srun",
        f"--jobid={job_id}",
        f"--nodes={len(nodes)}",
        f"--ntasks={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}",
        "--kill-on-bad-exit=0",
        *keep_on_node_failure(spec),
        "--label",
        "--input=all",
        f"--job-name={step_name(run_id)}",
        "--export=ALL",
        f"--chdir={cwd}",
    ]
    if cpus:
        argv.append(f"--cpus-per-task={cpus}")
    return [*argv, *container_flags(spec, cwd), "sh", "-c", STEP_SHELL]


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
    env.update(direct_env(spec, socket_ifname))
    return env


def direct_env(spec: JobSpec, socket_ifname: str | None) -> dict[str, str]:
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
    return [*argv, *extra, *shlex.split(python), "-c", STDIN_PROGRAM, verb, *args]


def every_node_argv(
    job_id: str, nodes: Sequence[str], name: str, python: str, *args: str, label: bool = False
) -> list[str]:
    """The node shim on every node in one step inside the allocation (--overlap), one task
    per node, the shim on every task's stdin; `label`: each line says its task."""
    argv = [
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        f"--nodes={len(nodes)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodes)}",
        f"--job-name={name}",
        "--export=ALL",
        "--input=all",
    ]
    label_flag = ["--label"] if label else []
    return [*argv, *label_flag, *shlex.split(python), "-S", "-c", STDIN_PROGRAM, *args]


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
    """Every node's torchrun line; with a job id, shown wrapped in that node's own srun step
    (the activation step and the working directory then belong to the node side); the
    launch runs the lines of torchrun_lines in one step for every node (steps.py)."""
    if job_id is None:
        return build_plan(spec, nodes, run_id, port)
    base = torchrun_lines(spec, run_id, nodes, port, cwd, ifnames)
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


def torchrun_lines(
    spec: JobSpec,
    run_id: str,
    nodes: Sequence[NodeTarget],
    port: int,
    cwd: str,
    ifnames: Mapping[str, str],
) -> LaunchPlan:
    """Every node's own torchrun line, as its srun task runs it (the working directory and
    the activation step are the step's: srun --chdir, on_node)."""
    return build_plan(
        spec.model_copy(update={"workdir": cwd, "activate": None}),
        nodes,
        run_id,
        port,
        socket_ifnames=ifnames,
    )


def step_nodes(spec: JobSpec, lines: LaunchPlan) -> dict[str, dict[str, object]]:
    """What the one step's task on each node runs (node/step.py's table): its command, its
    environment and its tag."""
    return {
        c.node: {"argv": on_node(c.argv, spec.activate), "env": dict(c.env), "tag": c.tag}
        for c in lines.commands
    }


def node_tag(run_id: str, index: int, direct: bool) -> str:
    """The tag of a node's processes: build_plan's per node, srun direct's one for all."""
    return direct_tag(run_id) if direct else f"{run_id}.{index}"


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
