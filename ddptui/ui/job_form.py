"""Provides the launch form's model: a job as text fields, each checked with a reason, and back.

No Textual here: the form screen shows what `check_form` says, so the rules are tested alone.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ddptui.core.job import rules as job_rules
from ddptui.core.job.hosts import expand_hosts
from ddptui.core.job.secret_env import unmask_env
from ddptui.core.job.spec import (
    JobSpec,
    SlurmSpec,
    SpecError,
    parse_env_pairs,
)

# Form field id -> where its value goes in the JobSpec (for pydantic's error locations).
SPEC_PATH: dict[str, tuple[str, ...]] = {
    "backend": ("backend",),
    "hosts": ("hosts",),
    "nodes": ("nodes",),
    "nproc_per_node": ("nproc_per_node",),
    "script": ("script",),
    "script_args": ("script_args",),
    "workdir": ("workdir",),
    "env": ("env",),
    "activate": ("activate",),
    "rdzv_port": ("rdzv_port",),
    "container_image": ("container", "image"),
    "container_engine": ("container", "engine"),
    "container_mounts": ("container", "mounts"),
    "slurm_mode": ("slurm", "mode"),
    "slurm_launch": ("slurm", "launch"),
    "partition": ("slurm", "partition"),
    "time": ("slurm", "time"),
    "gres": ("slurm", "gres"),
    "slurm_args": ("slurm", "extra_args"),
}
FIELDS = tuple(SPEC_PATH)


@dataclass(frozen=True)
class JobRequest:
    """What a screen hands the app: use this job, and launch it at once or not; `again_of`:
    the launch is the operator's relaunch of that run (an attempt of it, in history)."""

    spec: JobSpec
    launch: bool = False
    again_of: str | None = None


@dataclass
class FormCheck:
    """The job the fields make, or why not: one reason per field that is wrong."""

    spec: JobSpec | None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.spec is not None and not self.errors


def _words(values: tuple[str, ...]) -> str:
    return shlex.join(values)


def values_from_spec(spec: JobSpec) -> dict[str, str]:
    """The job as the form shows it."""
    c, s = spec.container, spec.slurm
    return {
        "backend": spec.backend,
        "hosts": ",".join(spec.hosts),
        "nodes": str(spec.nodes),
        "nproc_per_node": str(spec.nproc_per_node),
        "script": spec.script,
        "script_args": _words(spec.script_args),
        "workdir": spec.workdir or "",
        "env": " ".join(shlex.quote(f"{k}={v}") for k, v in spec.masked().env.items()),
        "activate": spec.activate or "",
        "rdzv_port": str(spec.rdzv_port or ""),
        "container_image": c.image if c else "",
        "container_engine": c.engine if c else "podman",
        "container_mounts": _words(c.mounts) if c else "",
        "slurm_mode": s.mode,
        "slurm_launch": s.launch,
        "partition": s.partition or "",
        "time": s.time or "",
        "gres": s.gres or "",
        "slurm_args": _words(s.extra_args),
    }


def _number(text: str, low: int, high: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"must be a whole number, not {text.strip()!r}") from None
    if value < low or (high is not None and value > high):
        raise ValueError(f"must be between {low} and {high}" if high else f"must be at least {low}")
    return value


def _split(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"{exc} (quote words as in a shell)") from None


def _parsers() -> dict[str, Callable[[str], Any]]:
    return {
        "nodes": lambda t: _number(t, 1),
        "nproc_per_node": lambda t: _number(t, 1),
        "rdzv_port": lambda t: _number(t, 1, 65535) if t.strip() else None,
        "script_args": _split,
        "container_mounts": _split,
        "slurm_args": _split,
        "env": lambda t: parse_env_pairs(_split(t)),
        "hosts": lambda t: tuple(expand_hosts(t)) if t.strip() else (),
    }


def check_form(values: Mapping[str, str], base: JobSpec, cwd: Path | None = None) -> FormCheck:
    """Check every field; the fields the form has no control for are kept from `base`."""
    errors: dict[str, str] = {}
    parsed: dict[str, Any] = {}
    parsers = _parsers()
    for name in FIELDS:
        text = values.get(name, "")
        try:
            parsed[name] = parsers[name](text) if name in parsers else (text.strip() or None)
        except (ValueError, SpecError) as exc:
            errors[name] = str(exc).replace("malformed --env", "malformed")
    _cross_checks(parsed, errors)
    _script_here(parsed, errors, cwd)
    if errors:
        return FormCheck(None, errors)
    data = base.model_dump()
    for name, path in SPEC_PATH.items():
        if len(path) == 1:
            data[path[0]] = parsed[name]
    data["env"] = unmask_env(data["env"], base.env)
    data["hosts"] = parsed["hosts"][: parsed["nodes"]]
    data["container"] = (
        {
            "image": parsed["container_image"],
            "engine": parsed["container_engine"] or "podman",
            "mounts": parsed["container_mounts"],
        }
        if parsed["container_image"]
        else None
    )
    data["slurm"] = {**data["slurm"]}
    for name, path in SPEC_PATH.items():
        if path[0] == "slurm":
            data["slurm"][path[1]] = parsed[name] if parsed[name] is not None else _default(path)
    try:
        return FormCheck(JobSpec.model_validate(data))
    except ValidationError as exc:
        return FormCheck(None, _locate(exc))


def _script_here(parsed: dict[str, Any], errors: dict[str, str], cwd: Path | None) -> None:
    """The local backend runs the script on this machine: it must be here."""
    script = parsed.get("script")
    if parsed.get("backend") != "local" or not script or "script" in errors:
        return
    workdir = Path(parsed["workdir"]).expanduser() if parsed.get("workdir") else (cwd or Path.cwd())
    path = Path(script).expanduser()
    if not (path if path.is_absolute() else workdir / path).is_file():
        errors["script"] = f"not found: {script} (looked in {workdir})"


def _default(path: tuple[str, ...]) -> Any:
    return SlurmSpec().model_dump()[path[1]]


def _cross_checks(parsed: dict[str, Any], errors: dict[str, str]) -> None:
    if not parsed.get("script") and "script" not in errors:
        errors["script"] = "required: the training script to run"
    engine, image = parsed.get("container_engine"), parsed.get("container_image")
    fields = {
        **parsed,
        # the engine's list always shows one: it counts as given with an image, or as pyxis
        "container_engine": engine if image or engine == "pyxis" else None,
    }
    for problem in job_rules.problems(fields):
        if problem.field not in errors:
            errors[problem.field] = problem.note


def _locate(exc: ValidationError) -> dict[str, str]:
    errors: dict[str, str] = {}
    by_path = {path: name for name, path in SPEC_PATH.items()}
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        name = by_path.get(loc[:2]) or by_path.get(loc[:1]) or "script"
        errors.setdefault(name, err["msg"].lower())
    return errors
