"""Provides JobSpec, the validated description of one job, and the errors bad input raises."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ddptui.core.job.metric_patterns import PatternError, compile_metric_patterns
from ddptui.core.job.secret_env import MASK, mask_env, secret_names, secret_values

Backend = Literal["local", "ssh", "slurm"]
BACKENDS: tuple[str, ...] = ("local", "ssh", "slurm")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The signals a teardown may send the workers before SIGKILL (names without SIG).
STOP_SIGNALS = ("TERM", "INT", "HUP", "QUIT", "USR1", "USR2")
_SLURM_SIGNAL = re.compile(r"(?:[BR]{1,2}:)?(?:SIG)?[A-Z0-9]+(?:@\d+)?")
# What `--notify CMD` is run for (session/notify.py): the run ended badly, a restart storm,
# or an incident of one of the story's kinds (story/incident.py's IncidentKind values).
NOTIFY_TRIGGERS = (
    "ended", "restart_storm", "crash", "out_of_memory", "hang", "collective_mismatch",
    "straggler", "non_finite", "node_lost", "agent_lost", "preempted", "operator_stop",
    "refused", "launch_failed", "restarted", "settings_differ", "known_bad_nccl",
)  # fmt: skip
NOTIFY_ALIASES = {"stall": "hang"}  # the word operators use for what the story calls a hang
DEFAULT_NOTIFY_ON = ("ended", "hang", "restart_storm", "non_finite")


# `Epoch 49`, `step=120`, `Steps: 8`, `iter 7`, `iteration 7`; the first number is the progress.
# ASCII word boundaries and a look at the first letter before the case-blind alternation: the
# same matches as `(?i)\b(?:epoch|steps?|iter(?:ation)?)\b...` on ASCII text, 3x faster.
DEFAULT_PROGRESS_PATTERN = r"(?a)\b(?=[EeSsIi])(?i:epoch|steps?|iter(?:ation)?)\b\s*[:=]?\s*(\d+)"


class SpecError(ValueError):
    """Bad input from the operator; the message is one line that says what to fix."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ContainerSpec(_Model):
    """Run torchrun inside a container on every node (podman/docker) or through pyxis (Slurm)."""

    image: str
    engine: Literal["podman", "docker", "pyxis"] = "podman"
    mounts: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()


class SshSpec(_Model):
    engine: Literal["asyncssh", "paramiko"] = "asyncssh"
    config_file: str | None = None
    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    fanout: int = Field(32, ge=1)
    connect_timeout: float = Field(10.0, gt=0)
    user: str | None = None


class SlurmSpec(_Model):
    mode: Literal["auto", "salloc", "existing", "sbatch"] = "auto"
    launch: Literal["torchrun", "srun"] = "torchrun"
    partition: str | None = None
    time: str | None = None
    gres: str | None = None
    exclusive: bool = False
    account: str | None = None
    # Slurm's own warning before a time limit or preemption (sbatch/salloc --signal), e.g.
    # "B:USR1@120": the batch shell (B:) passes it on to every worker (batch_script.py).
    signal: str | None = None
    extra_args: tuple[str, ...] = ()

    @field_validator("signal")
    @classmethod
    def _slurm_signal(cls, value: str | None) -> str | None:
        if value is None:
            return None
        match = _SLURM_SIGNAL.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"{value!r} is not [B:|R:]SIG[@SECONDS] (for example B:USR1@120)")
        return value.strip()


class JobSpec(_Model):
    """Everything needed to launch one job; CLI flags and profiles both end up here."""

    profile: str = "local"
    backend: Backend = "local"
    nodes: int = Field(2, ge=1)  # MAX of an elastic job (`--nodes MIN:MAX`: job/elastic.py)
    min_nodes: int | None = Field(None, ge=1)  # MIN of an elastic job; None: a fixed count
    spares: int = Field(0, ge=0)  # extra hosts (SSH) started when a node of the job is lost
    # torchft: this many replica groups, one per node, with the Lighthouse on the first node
    # (job/ft.py); 0: not a torchft job. Quorum from `ft_min_replicas` groups.
    ft_replicas: int = Field(0, ge=0)
    ft_min_replicas: int = Field(1, ge=1)
    # the Lighthouse's waits: for stragglers to join a quorum, for a heartbeat before a group
    # is taken for dead (torchft's defaults: 60 s and 5 s; a quorum in 2 s here)
    ft_join_timeout_ms: int = Field(2000, ge=0)
    ft_heartbeat_timeout_ms: int = Field(5000, ge=1)
    ft_lighthouse_port: int | None = Field(None, ge=1, le=65535)  # None: 29510; local: a free one
    nproc_per_node: int = Field(2, ge=1)
    script: str
    script_args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    # Names whose values are secret beyond those secret_env.is_secret recognises by name.
    secret_env: tuple[str, ...] = ()
    workdir: str | None = None
    hosts: tuple[str, ...] = ()
    rdzv_port: int | None = Field(None, ge=1, le=65535)
    launcher: str = "torchrun"
    python: str = "python3"
    activate: str | None = None
    container: ContainerSpec | None = None
    socket_ifname: str | None = None
    max_restarts: int = Field(0, ge=0)
    # torchrun's --rdzv_conf (`last_call_timeout=5,join_timeout=600`); an elastic job's
    # nodes get `is_host` too, so the first node always serves the rendezvous
    rdzv_conf: str | None = None
    # Local pseudo-nodes on a GPU machine: a disjoint CUDA_VISIBLE_DEVICES each (job/gpus.py).
    gpu_split: bool = True
    # Why the job has the shape it has, when ddptui chose it (job/gpus.py fit_default_shape):
    # said at launch. Not a profile key.
    shape_note: str = ""
    # No rank progressed for this long: the job is stalled (its stacks are taken); 0: off.
    hang_timeout: float = Field(120.0, ge=0)
    flight_recorder: bool = True  # torch's flight recorder on (NCCL, gloo), dumps gathered
    stacks_method: Literal["auto", "signal", "py-spy"] = "auto"  # auto: py-spy where it may
    # Teardown: these signals go to every worker directly, in order (torchrun forwards only
    # INT/TERM/HUP/QUIT and kills its workers 30 s after TERM), the agents are left to end on
    # their own once their workers have, and what is left after `grace` seconds gets SIGKILL.
    stop_signals: tuple[str, ...] = ("TERM",)
    grace: float = Field(3.0, ge=0, le=3600)
    # Each node's GPUs are sampled this often while the job runs (ms); 0: off.
    gpu_sample_ms: int = Field(1000, ge=0)
    # What a rank's progress lines look like (first number = step), for straggler detection.
    progress_pattern: str = DEFAULT_PROGRESS_PATTERN
    # The job's own metrics beyond the common formats: name -> regex whose one group is the
    # number (`{"ppl" = 'perplexity (\\S+)'}`); they win over the formats for their names.
    metric_patterns: dict[str, str] = Field(default_factory=dict)
    read_metrics: bool = True  # the ranks' lines read for metrics (off: `--no-metrics`)
    # The console hides every action that changes the job (`--read-only`, k9s's readonly).
    read_only: bool = False
    # Alerts when nobody watches (session/notify.py): this command, through the shell on the
    # head node, with the incident's JSON on stdin, once for each incident `notify_on` picks.
    notify: str | None = None
    notify_on: tuple[str, ...] = DEFAULT_NOTIFY_ON
    ssh: SshSpec = Field(default_factory=SshSpec)  # type: ignore[arg-type]
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)

    @model_validator(mode="after")
    def _min_below_max(self) -> JobSpec:
        if self.min_nodes is not None and self.min_nodes > self.nodes:
            raise ValueError(f"MIN {self.min_nodes} is above MAX {self.nodes} (--nodes MIN:MAX)")
        if self.ft_replicas and self.ft_replicas != self.nodes:
            raise ValueError(
                f"--ft-replicas {self.ft_replicas} runs one replica group per node: "
                f"--nodes must be {self.ft_replicas}, not {self.nodes}"
            )
        if self.ft_replicas and (self.min_nodes is not None or self.spares):
            raise ValueError(
                "a torchft job keeps its groups by itself: no --nodes MIN:MAX, no --spares"
            )
        if self.ft_min_replicas > max(self.ft_replicas, 1):
            raise ValueError(
                f"--ft-min-replicas {self.ft_min_replicas} is above the "
                f"{self.ft_replicas} replica group(s)"
            )
        return self

    @field_validator("progress_pattern")
    @classmethod
    def _progress_regex(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return pattern

    @field_validator("metric_patterns")
    @classmethod
    def _metric_regexes(cls, patterns: dict[str, str]) -> dict[str, str]:
        try:
            compile_metric_patterns(patterns)
        except PatternError as exc:
            raise ValueError(str(exc)) from None
        return patterns

    @field_validator("stop_signals", mode="before")
    @classmethod
    def _stop_signals(cls, value: Any) -> tuple[str, ...]:
        words = [value] if isinstance(value, str) else list(value)
        names = [w.strip().upper().removeprefix("SIG") for w in words for w in w.split(",")]
        names = [n for n in names if n]
        unknown = [n for n in names if n not in STOP_SIGNALS]
        if unknown or not names:
            raise ValueError(
                f"stop signal {', '.join(unknown) or '(none)'}: one of {', '.join(STOP_SIGNALS)}"
            )
        return tuple(names)

    @field_validator("notify")
    @classmethod
    def _notify_command(cls, command: str | None) -> str | None:
        if command is not None and not command.strip():
            raise ValueError("empty command (leave notify out for no alerts)")
        return command

    @field_validator("notify_on", mode="before")
    @classmethod
    def _notify_on(cls, value: Any) -> tuple[str, ...]:
        words = [value] if isinstance(value, str) else value
        if not isinstance(words, list | tuple) or not all(isinstance(w, str) for w in words):
            raise ValueError(f"expected names, as a list or a comma list (got {value!r})")
        names = [w.strip().lower().replace("-", "_") for w in words for w in w.split(",")]
        names = list(dict.fromkeys(NOTIFY_ALIASES.get(n, n) for n in names if n))
        unknown = [n for n in names if n not in NOTIFY_TRIGGERS]
        if unknown or not names:
            raise ValueError(
                f"notify on {', '.join(unknown) or '(nothing)'}: "
                f"choose among {', '.join(NOTIFY_TRIGGERS)}"
            )
        return tuple(names)

    @field_validator("launcher", "python")
    @classmethod
    def _shell_words(cls, command: str) -> str:
        """These are split into words as a shell would: an unclosed quote is an error now,
        not a traceback at launch."""
        try:
            words = shlex.split(command)
        except ValueError as exc:
            raise ValueError(f"{exc} in {command!r} (quote words as in a shell)") from None
        if not words:
            raise ValueError("empty command")
        return command

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"invalid environment variable name {name!r}")
        return env

    @field_validator("secret_env")
    @classmethod
    def _secret_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"invalid environment variable name {name!r}")
        return names

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def secrets(self) -> frozenset[str]:
        """The names in `env` whose values are secret."""
        return secret_names(self.env, self.secret_env)

    @property
    def secret_values(self) -> tuple[str, ...]:
        return secret_values(self.env, self.secret_env)

    def unmasked(self, environ: Mapping[str, str] | None = None) -> JobSpec:
        """This job ready to run: a secret left masked (a job read back from a saved run,
        which never keeps secret values) takes its value from this environment."""
        here = os.environ if environ is None else environ
        env = dict(self.env)
        for name in self.secrets:
            if env[name] != MASK:
                continue
            if name not in here:
                raise SpecError(
                    f"{name} is masked in the saved job (secret values are never kept): "
                    f"export {name} and run it again, or give --env {name}=VALUE"
                )
            env[name] = here[name]
        return self.model_copy(update={"env": env})

    def masked(self) -> JobSpec:
        """This job as it may be shown or saved: secret values replaced by `***`."""
        return self.model_copy(update={"env": mask_env(self.env, self.secret_env)})


def make_spec(**fields: object) -> JobSpec:
    """Build a JobSpec, turning pydantic's multi-line report into one SpecError line."""
    try:
        return JobSpec.model_validate(fields)
    except ValidationError as exc:
        raise SpecError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "job"
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    return "; ".join(parts)


def parse_env_pairs(
    pairs: Iterable[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Turn `K=V` strings into a dict; a bare `K` takes its value from this environment (so a
    secret need not be typed on a command line); a bad name or an unset `K` is an error."""
    here = os.environ if environ is None else environ
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not _ENV_NAME.fullmatch(name):
            raise SpecError(f"malformed --env {pair!r}: expected NAME=VALUE or NAME")
        if not sep:
            if name not in here:
                raise SpecError(
                    f"--env {name}: {name} is not set in this environment "
                    f"(export it, or give {name}=VALUE)"
                )
            value = here[name]
        env[name] = value
    return env


def check_local_script(spec: JobSpec, base: Path | None = None) -> Path:
    """The script must exist where the console can see it (local backend, or a shared workdir)."""
    workdir = Path(spec.workdir) if spec.workdir else (base or Path.cwd())
    path = Path(spec.script)
    if not path.is_absolute():
        path = workdir / path
    if not path.is_file():
        raise SpecError(f"script not found: {spec.script} (looked in {workdir})")
    return path
