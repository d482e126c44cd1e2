"""Provides job profiles: named jobs in TOML files, the built-in presets, and their precedence.

Where profiles come from, lowest precedence first (a later file's profile replaces an earlier
one of the same name, whole):

1. the built-in presets below,
2. the user's file, `platformdirs.user_config_dir("ddptui")/profiles.toml`
   (`$DDPTUI_CONFIG_DIR/profiles.toml` when that is set),
3. the project's `ddptui.toml`, found in the working directory or the nearest parent.

A job is then built from CLI flags over the chosen profile over the built-in defaults
(`compose`). Every problem in a file is reported with the file, the profile, the field and
the reason, before anything runs.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import ValidationError

from ddptui.core.job.elastic import split_node_range
from ddptui.core.job.hosts import expand_hosts, read_hostfile
from ddptui.core.job.spec import ContainerSpec, JobSpec, SlurmSpec, SpecError, SshSpec

PROJECT_FILE = "ddptui.toml"
USER_FILE = "profiles.toml"
BUILTIN = "built-in"
TRAINER_MARK = "{trainer}"
DEFAULT_PROFILE = "local"
# Keys a profile has beyond JobSpec's fields; `profile` itself is the table's name.
EXTRA_KEYS = ("description", "extends", "hostfile")
TABLES: dict[str, type[Any]] = {"ssh": SshSpec, "slurm": SlurmSpec, "container": ContainerSpec}
# Merged key by key across layers, not replaced.
MERGED = ("env", "metric_patterns", "ssh", "slurm", "container")
PROFILE_KEYS = tuple(sorted({*JobSpec.model_fields, *EXTRA_KEYS} - {"profile", "shape_note"}))

BUILTIN_TOML = """
[profiles.local]
description = "2 pseudo-nodes x 2 processes on this machine: the environment check"
backend = "local"
nodes = 2
nproc_per_node = 2
script = "{trainer}/envcheck.py"

[profiles.env-check]
description = "Every rank prints its ranks and host, all-reduce check (add --hosts or Slurm)"
nproc_per_node = 2
script = "{trainer}/envcheck.py"

[profiles.cpu-ddp-conda]
description = "sbatch + srun + torchrun in a conda env (AWS ParallelCluster CPU DDP)"
backend = "slurm"
nodes = 2
nproc_per_node = 4
script = "{trainer}/cpu_ddp.py"
script_args = ["50", "10"]
activate = "conda activate pytorch"
slurm = { launch = "torchrun" }

[profiles.cpu-ddp-container]
description = "srun + torchrun in a pyxis/enroot container (edit the image path)"
backend = "slurm"
nodes = 2
nproc_per_node = 4
script = "{trainer}/cpu_ddp.py"
script_args = ["50", "10"]
container = { image = "pytorch.sqsh", engine = "pyxis" }
slurm = { launch = "torchrun" }

[profiles.elastic-ddp]
description = "PyTorch's basic DDP example under torchrun's c10d rendezvous"
nodes = 2
nproc_per_node = 2
script = "{trainer}/elastic_ddp.py"
script_args = ["--steps", "10"]

[profiles.cifar10-vgg]
description = "VGG-11 on CIFAR-10, srun without torchrun: one task per GPU, ranks from SLURM_PROCID"
backend = "slurm"
nodes = 2
nproc_per_node = 4
script = "{trainer}/cifar10_vgg.py"
script_args = ["--launch", "srun", "--epochs", "10", "--data", "cifar-10-batches-py"]
slurm = { launch = "srun", gres = "gpu:4", exclusive = true }
"""


class ProfileError(SpecError):
    """A profile that cannot be used; the message names the file, profile, field and reason."""


def bundled_trainer_dir() -> Path:
    """trainer/ as shipped in the package, or beside a source checkout."""
    package = Path(__file__).resolve().parents[2]
    for candidate in (package / "trainer", package.parent / "trainer"):
        if candidate.is_dir():
            return candidate
    return package.parent / "trainer"


def bundled_trainer(name: str = "envcheck.py") -> str:
    """Path of a script from trainer/, shipped with the package or beside a source checkout."""
    return str(bundled_trainer_dir() / name)


def user_config_dir() -> Path:
    """`$DDPTUI_CONFIG_DIR`, else the XDG config dir (~/.config/ddptui)."""
    override = os.environ.get("DDPTUI_CONFIG_DIR")
    return Path(override) if override else Path(platformdirs.user_config_dir("ddptui"))


def project_file(start: Path | None = None) -> Path | None:
    """The nearest `ddptui.toml` in `start` (default: the working directory) or a parent."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / PROJECT_FILE
        if candidate.is_file():
            return candidate
    return None


def profile_files(start: Path | None = None) -> list[Path]:
    """The profile files that exist, lowest precedence first."""
    files = [user_config_dir() / USER_FILE]
    project = project_file(start)
    if project is not None:
        files.append(project)
    return [f for f in files if f.is_file()]


@dataclass(frozen=True)
class Profile:
    """One profile as written: only the fields it sets, checked, and where it came from."""

    name: str
    fields: dict[str, Any]
    source: str
    description: str = ""
    extends: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source}: profile {self.name!r}"


@dataclass(frozen=True)
class ResolvedProfile:
    """A profile with its `extends` chain applied: JobSpec fields, and who set each one."""

    name: str
    fields: dict[str, Any]
    origin: dict[str, str] = field(default_factory=dict)
    description: str = ""

    def where(self, name: str) -> str:
        return self.origin.get(name, f"profile {self.name!r}")

    def require_script(self) -> None:
        if not self.fields.get("script"):
            raise ProfileError(
                f'{self.where("profile")}: script: missing — set script = "train.py" in the '
                "profile, or give the script on the command line"
            )


# -- reading and checking ---------------------------------------------------------------------


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _reason(err: Mapping[str, Any]) -> str:
    loc = [str(p) for p in err["loc"]]
    if err["type"] == "extra_forbidden":
        table = TABLES.get(loc[0]) if len(loc) > 1 else None
        known = sorted(table.model_fields) if table else PROFILE_KEYS
        return f"{'.'.join(loc)}: unknown key{_did_you_mean(loc[-1], known)}"
    shown = err.get("input")
    got = f" (got {shown!r})" if not isinstance(shown, dict) else ""
    # pydantic's words, which may quote the user's value: its case is kept
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{'.'.join(loc)}: {msg[:1].lower()}{msg[1:]}{got}"


def _check_types(table: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for key in ("description", "extends", "hostfile"):
        if key in table and not isinstance(table[key], str):
            problems.append(f"{key}: expected a string (got {table[key]!r})")
    hosts = table.get("hosts")
    names_ok = isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)
    if hosts is not None and not (isinstance(hosts, str) or names_ok):
        problems.append(f"hosts: expected a host list string or a list of names (got {hosts!r})")
    if "hosts" in table and "hostfile" in table:
        problems.append("hostfile: give hosts or hostfile, not both")
    if "profile" in table:
        problems.append("profile: unknown key (a profile's name is its table name)")
    return problems


def check_profile(name: str, table: Any, source: str) -> Profile:
    """Every problem of one profile at once, each as `field: reason`, in one ProfileError."""
    where = f"{source}: profile {name!r}"
    if not isinstance(table, dict):
        raise ProfileError(f"{where}: expected a table ([profiles.{name}]), got {table!r}")
    problems = _check_types(table)
    spec_part = {k: v for k, v in table.items() if k not in (*EXTRA_KEYS, "hosts", "profile")}
    if isinstance(table.get("hosts"), list):
        spec_part["hosts"] = table["hosts"]
    spec_part.setdefault("script", "placeholder.py")
    try:
        spec_part = split_node_range(spec_part)  # nodes = "2:3": an elastic job
    except SpecError as exc:
        problems.append(str(exc))
        spec_part.pop("nodes")
    try:
        JobSpec.model_validate_json(json.dumps(spec_part, default=str), strict=True)
    except ValidationError as exc:
        problems += [_reason(err) for err in exc.errors()]
    if problems:
        raise ProfileError(f"{where}: " + f"\n{where}: ".join(problems))
    fields = {k: v for k, v in table.items() if k not in ("description", "extends")}
    return Profile(name, fields, source, table.get("description", ""), table.get("extends"))


def parse_profiles(text: str, source: str) -> dict[str, Profile]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: not valid TOML: {exc}") from None
    unknown = [k for k in data if k != "profiles"]
    if unknown:
        raise ProfileError(
            f"{source}: {unknown[0]}: unknown top-level key (profiles go in [profiles.NAME])"
        )
    tables = data.get("profiles", {})
    if not isinstance(tables, dict):
        raise ProfileError(f"{source}: profiles: expected tables [profiles.NAME]")
    errors: list[str] = []
    profiles: dict[str, Profile] = {}
    for name, table in tables.items():
        try:
            profiles[name] = check_profile(name, table, source)
        except ProfileError as exc:
            errors.append(str(exc))
    if errors:
        raise ProfileError("\n".join(errors))
    return profiles


def read_profile_file(path: Path) -> dict[str, Profile]:
    try:
        text = path.read_bytes().decode()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read it: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(
            f"{path}: not UTF-8 text (byte {exc.start}): save the profile file as UTF-8"
        ) from None
    return parse_profiles(text, str(path))


def builtin_profiles() -> dict[str, Profile]:
    return parse_profiles(BUILTIN_TOML, BUILTIN)


# -- the set of profiles and resolving one ------------------------------------------------------


class ProfileSet:
    """Every profile this console can use, later layers replacing earlier ones by name."""

    def __init__(self, layers: Sequence[Mapping[str, Profile]]) -> None:
        self.profiles: dict[str, Profile] = {}
        for layer in layers:
            self.profiles.update(layer)

    def names(self) -> list[str]:
        return list(self.profiles)

    def __contains__(self, name: object) -> bool:
        return name in self.profiles

    def get(self, name: str) -> Profile:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(self.profiles)
            hint = _did_you_mean(name, list(self.profiles))
            raise ProfileError(f"no profile {name!r}{hint}; known profiles: {known}") from None

    def chain(self, name: str) -> list[Profile]:
        """The profile and what it extends, base first."""
        chain: list[Profile] = []
        seen: list[str] = []
        current: str | None = name
        while current is not None:
            if current in seen:
                loop = " -> ".join([*seen, current])
                raise ProfileError(f"{chain[0].where}: extends: a loop ({loop})")
            seen.append(current)
            if current != name and current not in self.profiles:
                raise ProfileError(f"{chain[-1].where}: extends: no profile {current!r}")
            profile = self.get(current)
            chain.append(profile)
            current = profile.extends
        return list(reversed(chain))

    def resolve(self, name: str) -> ResolvedProfile:
        merged: dict[str, Any] = {}
        setter: dict[str, Profile] = {}
        chain = self.chain(name)
        for profile in chain:
            if "hosts" in profile.fields:
                merged.pop("hostfile", None)
            if "hostfile" in profile.fields:
                merged.pop("hosts", None)
            merged = merge_fields(merged, profile.fields)
            setter.update(dict.fromkeys(profile.fields, profile))
        setter["profile"] = chain[-1]
        fields = _to_spec_fields(merged, setter)
        fields["profile"] = name
        origin = {key: profile.where for key, profile in setter.items()}
        return ResolvedProfile(name, fields, origin, chain[-1].description)


def merge_fields(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    """`high` over `low`; the tables (env, metric_patterns, ssh, slurm, container) merge key
    by key."""
    out = dict(low)
    for key, value in high.items():
        if key in MERGED and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _to_spec_fields(fields: dict[str, Any], setter: Mapping[str, Profile]) -> dict[str, Any]:
    out = dict(fields)
    script = out.get("script")
    if isinstance(script, str) and TRAINER_MARK in script:
        out["script"] = script.replace(TRAINER_MARK, str(bundled_trainer_dir()))
    try:
        if isinstance(out.get("hosts"), str):
            out["hosts"] = expand_hosts(out["hosts"])
    except SpecError as exc:
        raise ProfileError(f"{setter['hosts'].where}: hosts: {exc}") from None
    hostfile = out.pop("hostfile", None)
    if hostfile is not None:
        where = setter["hostfile"].where
        base = Path(setter["hostfile"].source).parent  # relative to the file that names it
        path = Path(hostfile).expanduser()
        try:
            entries = read_hostfile(path if path.is_absolute() else base / path)
        except SpecError as exc:
            raise ProfileError(f"{where}: hostfile: {exc}") from None
        out["hosts"] = [e.name for e in entries]
        if entries[0].slots and "nproc_per_node" not in out:
            out["nproc_per_node"] = entries[0].slots
    return out


def load_profiles(start: Path | None = None, files: Sequence[Path] | None = None) -> ProfileSet:
    """The built-in presets, then the user's file, then the project's (or `files`)."""
    layers = [builtin_profiles()]
    layers += [
        read_profile_file(path) for path in (profile_files(start) if files is None else files)
    ]
    return ProfileSet(layers)


def compose(profile: Mapping[str, Any], cli: Mapping[str, Any]) -> dict[str, Any]:
    """CLI flags over the profile: only flags the operator gave count (`cli` holds just those)."""
    return merge_fields(profile, cli)
