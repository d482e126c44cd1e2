"""Provides run directories: every node's full log, the exact commands, events and outcome."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from pathlib import Path
from typing import IO, Any

import platformdirs

from ddptui.core.events import Event, MetricSampled
from ddptui.core.job.plan import LaunchPlan
from ddptui.core.job.spec import JobSpec, SpecError
from ddptui.core.metrics.metrics_file import FILE_NAME as METRICS_FILE
from ddptui.core.metrics.metrics_file import MetricsWriter
from ddptui.core.metrics.sample import MetricSample

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
ATTEMPT_OF = "attempt_of"  # the file that names the run a relaunch is an attempt of


def state_dir() -> Path:
    """`$DDPTUI_STATE_DIR`, else the XDG state dir (~/.local/state/ddptui)."""
    override = os.environ.get("DDPTUI_STATE_DIR")
    return Path(override) if override else Path(platformdirs.user_state_dir("ddptui"))


PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> Path:
    """Make `path` (and missing parents) a directory only its owner can enter."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR)
    return path


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, PRIVATE_FILE)


def open_private(path: Path, mode: str) -> IO[Any]:
    """`open(path, mode)`, creating the file readable and writable by its owner only."""
    f = open(path, mode, opener=_private_opener)  # noqa: SIM115 - the caller closes it
    os.fchmod(f.fileno(), PRIVATE_FILE)
    return f


def write_private(path: Path, text: str) -> Path:
    with open_private(path, "w") as f:
        f.write(text)
    return path


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def node_log_name(index: int, node: str) -> str:
    """A file name for a node's log that no host name (spaces, quotes, `;`) can break."""
    return f"{index:03d}-{_UNSAFE.sub('_', node)[:60]}.log"


class RunDir:
    """One run's directory; written as the run goes, so nothing is lost if the console dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.nodes_dir = path / "nodes"
        self._events: IO[str] | None = None
        self._metrics: MetricsWriter | None = None

    @classmethod
    def create(cls, run_id: str, root: Path | None = None) -> RunDir:
        runs = private_dir(root or state_dir() / "runs")
        path = runs / run_id
        path.mkdir(mode=PRIVATE_DIR)
        private_dir(path / "nodes")
        os.chmod(path, PRIVATE_DIR)
        return cls(path)

    @classmethod
    def open(cls, run_id_or_path: str, root: Path | None = None) -> RunDir:
        candidate = Path(run_id_or_path)
        path = candidate if candidate.is_dir() else (root or state_dir() / "runs") / run_id_or_path
        if not (path / "plan.json").is_file():
            raise FileNotFoundError(f"no run {run_id_or_path!r} in {path.parent}")
        return cls(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    def node_log(self, index: int, node: str) -> Path:
        return self.nodes_dir / node_log_name(index, node)

    def write_private(self, name: str, text: str) -> Path:
        """A file of this run, private to its owner (0600)."""
        return write_private(self.path / name, text)

    def write_spec(self, spec: JobSpec) -> None:
        self.write_private("spec.json", spec.masked().model_dump_json(indent=2))

    def write_plan(self, plan: LaunchPlan, backend_state: dict[str, Any]) -> None:
        self.write_private(
            "plan.json", json.dumps({**plan.to_dict(), "backend": backend_state}, indent=2)
        )
        script = ["#!/bin/sh", "# The command each node runs (as typed on that node).", ""]
        for command in plan.commands:
            script += [f"# node {command.index}: {command.node}", command.shell_line(), ""]
        self.write_private("commands.sh", "\n".join(script))

    def read_plan(self) -> tuple[LaunchPlan, dict[str, Any]]:
        try:
            data = json.loads((self.path / "plan.json").read_bytes())
            return LaunchPlan.from_dict(data), data.get("backend", {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SpecError(self._corrupt("plan.json", exc)) from None

    def read_spec(self) -> JobSpec:
        try:
            return JobSpec.model_validate_json((self.path / "spec.json").read_bytes())
        except (OSError, ValueError) as exc:
            raise SpecError(self._corrupt("spec.json", exc)) from None

    def _corrupt(self, name: str, exc: Exception) -> str:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return (
            f"run {self.run_id}: {self.path / name} cannot be read ({reason}): "
            "the run cannot be followed; its node logs are in "
            f"{self.nodes_dir}"
        )

    def mark_attempt_of(self, run_id: str) -> None:
        """This run is the operator's relaunch of run `run_id` (its first, if that was a
        relaunch too): history lists them as one run with its attempts."""
        self.write_private(ATTEMPT_OF, run_id + "\n")

    def attempt_of(self) -> str | None:
        """The run this one relaunched (`mark_attempt_of`), None for a run of its own."""
        try:
            return (self.path / ATTEMPT_OF).read_text().strip() or None
        except OSError:
            return None

    def record(self, event: Event) -> None:
        if self._events is None:
            self._events = open_private(self.path / "events.jsonl", "a")
        self._events.write(event.to_json() + "\n")
        self._events.flush()

    def record_metric(self, event: MetricSampled) -> None:
        """A rank's sample, appended to the run's `metrics.jsonl` (core/metrics/metrics_file.py
        says its format): the events log leaves them out, this file has every one."""
        if self._metrics is None:
            self._metrics = MetricsWriter(self.metrics_path)
        self._metrics.write(MetricSample(event.rank, event.step, event.values, event.ts))
        self._metrics.flush()

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    def write_summary(self, summary: dict[str, Any]) -> None:
        self.write_private("summary.json", json.dumps(summary, indent=2))

    def read_summary(self) -> dict[str, Any] | None:
        """The last summary written (a detached console's, for a run attached again); None
        when there is none or it cannot be read."""
        try:
            data = json.loads((self.path / "summary.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
