"""Provides the job flags shared by `ddptui`, `ddptui run` and friends, and JobSpec from them."""

from __future__ import annotations

import argparse
from typing import Any

from ddptui.core.job import rules
from ddptui.core.job.hosts import expand_hosts, read_hostfile
from ddptui.core.job.profiles import ProfileSet
from ddptui.core.job.resolve import resolve_job
from ddptui.core.job.spec import BACKENDS, JobSpec, SpecError, parse_env_pairs


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("job")
    job.add_argument(
        "--profile",
        metavar="NAME",
        help="start from this profile (ddptui.toml, the user's profiles.toml, or a preset); "
        "flags given here override it",
    )
    job.add_argument("--backend", help=f"where the nodes come from: {', '.join(BACKENDS)}")
    job.add_argument(
        "--nodes",
        type=_node_count,
        metavar="N|MIN:MAX",
        help="number of nodes (default 2 local, or #hosts); MIN:MAX: an elastic job, MAX "
        "started, going on while MIN remain",
    )
    job.add_argument(
        "--spares",
        type=int,
        metavar="N",
        help="extra hosts (SSH, elastic jobs) started when a node is lost: the hosts listed "
        "after the first MAX",
    )
    job.add_argument(
        "--ft-replicas",
        type=int,
        metavar="N",
        help="a torchft job: N replica groups, one per node, each its own torchrun, the "
        "Lighthouse on the first node (default script: the bundled ft_ddp.py)",
    )
    job.add_argument(
        "--ft-min-replicas",
        type=int,
        metavar="M",
        help="the Lighthouse's quorum needs M replica groups (default 1)",
    )
    job.add_argument(
        "--ft-lighthouse-port", type=int, metavar="PORT", help="the Lighthouse's port (29510)"
    )
    job.add_argument(
        "--ft-join-timeout-ms",
        type=int,
        metavar="MS",
        help="the Lighthouse waits this long for stragglers to join a quorum (default 2000)",
    )
    job.add_argument(
        "--ft-heartbeat-timeout-ms",
        type=int,
        metavar="MS",
        help="a group with no heartbeat this long is taken for dead (default 5000)",
    )
    job.add_argument("--nproc-per-node", type=int, help="processes per node (default 2)")
    job.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="environment for every rank (repeatable)",
    )
    job.add_argument(
        "--secret-env",
        action="append",
        default=[],
        metavar="NAME",
        help="treat this --env variable's value as secret (shown as ***) even if its name "
        "does not say so (names with TOKEN, SECRET, PASSWORD, PASSWD, KEY, CREDENTIAL are)",
    )
    job.add_argument("--workdir", help="working directory on the nodes")
    job.add_argument("--rdzv-port", type=int, help="rendezvous port (default: free port / 29400)")
    job.add_argument("--launcher", help="torchrun command on the nodes (default torchrun)")
    job.add_argument("--python", help="python3 on the nodes, for ddptui's node helper")
    job.add_argument("--activate", help="shell step before torchrun, e.g. 'conda activate env'")
    job.add_argument("--container-image", help="run torchrun in this container image")
    job.add_argument("--container-engine", choices=["podman", "docker", "pyxis"])
    job.add_argument("--container-mount", action="append", default=[], metavar="SRC:DST")
    job.add_argument("--socket-ifname", help="GLOO/NCCL_SOCKET_IFNAME on the nodes")
    job.add_argument("--max-restarts", type=int, help="torchrun --max-restarts")
    job.add_argument(
        "--rdzv-conf",
        metavar="K=V,...",
        help="torchrun --rdzv_conf, e.g. last_call_timeout=5 (how long an elastic job's "
        "rendezvous waits for more than MIN nodes)",
    )
    job.add_argument(
        "--no-gpu-split",
        dest="gpu_split",
        action="store_const",
        const=False,
        help="local pseudo-nodes on a GPU machine all see every GPU (by default each gets its "
        "own: a disjoint CUDA_VISIBLE_DEVICES)",
    )
    job.add_argument(
        "--hang-timeout",
        type=float,
        help="seconds with no rank progressing before the job is stalled (default 120; 0: off)",
    )
    job.add_argument(
        "--stop-signal",
        action="append",
        default=[],
        metavar="SIG",
        help="signal(s) sent to every worker at teardown, in order (default TERM; also INT, "
        "HUP, QUIT, USR1, USR2); the torchrun agent is left to end on its own",
    )
    job.add_argument(
        "--grace",
        type=float,
        metavar="SECONDS",
        help="seconds the workers get after the stop signal before SIGKILL (default 3)",
    )
    job.add_argument(
        "--no-flight-recorder",
        dest="flight_recorder",
        action="store_const",
        const=False,
        help="run without torch's flight recorder (on by default for NCCL and gloo)",
    )
    job.add_argument(
        "--gpu-sample-ms",
        type=int,
        metavar="MS",
        help="sample every node's GPUs this often while the job runs (default 1000; 0: off)",
    )
    job.add_argument(
        "--stacks-method",
        choices=["auto", "signal", "py-spy"],
        help="how stacks are taken: py-spy where it may attach, else a signal (auto)",
    )
    job.add_argument(
        "--progress-pattern",
        metavar="REGEX",
        help="a rank's progress lines (first number = step), for straggler detection; "
        "default matches 'Epoch N', 'step=N', 'Steps: N', 'iter N'",
    )
    job.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=REGEX",
        help="a metric of the job's own beyond the common formats: a regex whose one group "
        "is the number (repeatable; a profile's metric_patterns table does the same)",
    )
    job.add_argument(
        "--no-metrics",
        dest="read_metrics",
        action="store_false",
        default=None,
        help="do not read metrics from the ranks' lines (no metrics view, no metrics.jsonl)",
    )
    job.add_argument(
        "--notify",
        metavar="CMD",
        help="alerts when nobody watches: run CMD through the shell on this machine, the "
        "incident's JSON on stdin, once for each incident --notify-on picks (docs/notify.md)",
    )
    job.add_argument(
        "--notify-on",
        metavar="WHAT,...",
        help="what --notify is run for (default ended,hang,restart_storm,non_finite; also "
        "an incident kind: crash, out_of_memory, straggler, node_lost, preempted, ...)",
    )
    ssh = parser.add_argument_group("ssh")
    ssh.add_argument("--hosts", help="host list: a,b or node[01-04]")
    ssh.add_argument("--hostfile", help="one host per line, # comments, 'host slots=N'")
    ssh.add_argument("--ssh-engine", choices=["asyncssh", "paramiko"])
    ssh.add_argument("--ssh-config", help="ssh_config file (default ~/.ssh/config)")
    ssh.add_argument("--known-hosts", help="known_hosts file (default ~/.ssh/known_hosts)")
    ssh.add_argument(
        "--accept-new-host-keys",
        action="store_true",
        default=None,
        help="trust hosts whose key is unknown (never a changed key)",
    )
    ssh.add_argument("--ssh-fanout", type=int, help="concurrent connections (default 32)")
    slurm = parser.add_argument_group("slurm")
    slurm.add_argument("--slurm-mode", choices=["auto", "salloc", "existing", "sbatch"])
    slurm.add_argument("--launch", choices=["torchrun", "srun"], help="launch style (Slurm)")
    slurm.add_argument("--partition")
    slurm.add_argument("--time")
    slurm.add_argument("--gres")
    slurm.add_argument("--exclusive", action="store_true", default=None)
    slurm.add_argument("--account")
    slurm.add_argument(
        "--slurm-signal",
        metavar="[B:]SIG@SECONDS",
        help="sbatch/salloc --signal: Slurm's warning before a time limit or preemption, "
        "passed on to every worker (e.g. B:USR1@120)",
    )
    slurm.add_argument("--slurm-arg", action="append", default=[], help="extra salloc/sbatch arg")


def _node_count(text: str) -> int | str:
    """`3` as a number, `2:3` (or anything else) kept as written: the job's resolution reads
    a range and says what is wrong with the rest, in one line like every bad input."""
    text = text.strip()
    return int(text) if text.isdigit() else text


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v not in (None, [], ())}


def _metric_pairs(pairs: list[str]) -> dict[str, str] | None:
    """`--metric NAME=REGEX` flags as the spec's metric_patterns (None: none given)."""
    patterns: dict[str, str] = {}
    for pair in pairs:
        name, sep, regex = pair.partition("=")
        if not sep or not name.strip():
            raise SpecError(f"malformed --metric {pair!r}: expected NAME=REGEX")
        patterns[name.strip()] = regex
    return patterns or None


def _cli_hosts(args: argparse.Namespace) -> tuple[list[str], int | None]:
    if args.hosts:
        return expand_hosts(args.hosts), None
    if args.hostfile:
        entries = read_hostfile(args.hostfile)
        return [e.name for e in entries], entries[0].slots
    return [], None


def cli_fields(
    args: argparse.Namespace, script: str | None, script_args: list[str]
) -> dict[str, Any]:
    """Only what the operator typed on the command line: these override the profile."""
    hosts, slots = _cli_hosts(args)
    fields: dict[str, Any] = _drop_none(
        {
            "backend": args.backend,
            "nodes": args.nodes,
            "spares": getattr(args, "spares", None),
            "ft_replicas": getattr(args, "ft_replicas", None),
            "ft_min_replicas": getattr(args, "ft_min_replicas", None),
            "ft_lighthouse_port": getattr(args, "ft_lighthouse_port", None),
            "ft_join_timeout_ms": getattr(args, "ft_join_timeout_ms", None),
            "ft_heartbeat_timeout_ms": getattr(args, "ft_heartbeat_timeout_ms", None),
            "nproc_per_node": args.nproc_per_node or slots,
            "env": parse_env_pairs(args.env),
            "secret_env": tuple(args.secret_env),
            "workdir": args.workdir,
            "hosts": tuple(hosts),
            "rdzv_port": args.rdzv_port,
            "launcher": args.launcher,
            "python": args.python,
            "activate": args.activate,
            "socket_ifname": args.socket_ifname,
            "max_restarts": args.max_restarts,
            "rdzv_conf": args.rdzv_conf,
            "gpu_split": args.gpu_split,
            "hang_timeout": args.hang_timeout,
            "stop_signals": tuple(args.stop_signal),
            "grace": args.grace,
            "flight_recorder": args.flight_recorder,
            "stacks_method": args.stacks_method,
            "gpu_sample_ms": args.gpu_sample_ms,
            "progress_pattern": args.progress_pattern,
            "metric_patterns": _metric_pairs(args.metric),
            "read_metrics": args.read_metrics,
            "notify": args.notify,
            "notify_on": args.notify_on,
        }
    )
    if script:
        fields["script"] = script
        fields["script_args"] = tuple(script_args)
    # The container's flags only: the backend's own rules (its hosts, which a profile may
    # give) are checked once the profile is merged in.
    given = {
        "backend": "slurm" if args.backend in (None, "ssh") else args.backend,
        "container_image": args.container_image,
        "container_engine": args.container_engine,
        "container_mounts": args.container_mount,
    }
    found = [p for p in rules.problems(given) if p.field.startswith("container")]
    if found:
        raise SpecError(found[0].message)
    if args.container_image:
        fields["container"] = _drop_none(
            {
                "image": args.container_image,
                "engine": args.container_engine,
                "mounts": tuple(args.container_mount),
            }
        )
    nested = {
        "ssh": {
            "engine": args.ssh_engine,
            "config_file": args.ssh_config,
            "known_hosts": args.known_hosts,
            "accept_new_host_keys": args.accept_new_host_keys,
            "fanout": args.ssh_fanout,
        },
        "slurm": {
            "mode": args.slurm_mode,
            "launch": args.launch,
            "partition": args.partition,
            "time": args.time,
            "gres": args.gres,
            "exclusive": args.exclusive,
            "account": args.account,
            "signal": args.slurm_signal,
            "extra_args": tuple(args.slurm_arg),
        },
    }
    fields.update({k: _drop_none(v) for k, v in nested.items() if _drop_none(v)})
    return fields


def spec_from_args(
    args: argparse.Namespace,
    script: str | None,
    script_args: list[str],
    profiles: ProfileSet | None = None,
) -> JobSpec:
    """CLI flags over the profile (`--profile`) over the built-in defaults."""
    fields = cli_fields(args, script, script_args)
    return resolve_job(fields, getattr(args, "profile", None), profiles)
