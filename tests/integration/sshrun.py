"""Runs the real `ddptui` CLI inside the testbed's head namespace and reads its JSON events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.netns import Testbed
from tests.cases import ROOT

TRAINER = ROOT / "trainer"


@dataclass
class HeadlessRun:
    code: int
    events: list[dict[str, Any]]
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Any]:
        assert self.events and self.events[-1]["event"] == "summary", (
            self.events[-5:],
            self.stderr,
        )
        return self.events[-1]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]


def ddptui_argv(tb: Testbed, *args: str, ssh_config: Path | None = None) -> list[str]:
    assert tb.ssh is not None
    cfg = str(ssh_config or tb.ssh.ssh_config)
    return tb.ns_argv(
        "head", [sys.executable, "-m", "ddptui.cli", *args[:1], "--ssh-config", cfg, *args[1:]]
    )


def state_env(state: Path) -> dict[str, str]:
    return {**os.environ, "DDPTUI_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}


def run_headless(
    tb: Testbed, state: Path, *args: str, timeout: float = 240, ssh_config: Path | None = None
) -> HeadlessRun:
    proc = subprocess.run(
        ddptui_argv(tb, "run", "--headless", "--backend", "ssh", *args, ssh_config=ssh_config),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=state.parent,
        env=state_env(state),
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return HeadlessRun(proc.returncode, events, proc.stderr)


def popen_headless(tb: Testbed, state: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ddptui_argv(tb, "run", "--headless", "--backend", "ssh", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=state.parent,
        env=state_env(state),
    )


def read_until(
    proc: subprocess.Popen[str], predicate: Any, limit: int = 100000
) -> list[dict[str, Any]]:
    """Read events until `predicate(event)` is true; return all read so far."""
    assert proc.stdout is not None
    seen: list[dict[str, Any]] = []
    for _ in range(limit):
        line = proc.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        seen.append(event)
        if predicate(event):
            break
    return seen


def rank_steps(events: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Each global rank's states in order, a repeat collapsed: a `rank` event also reports a
    diagnosis or a straggler flag (a loaded machine makes some rank slow) without a move."""
    steps: dict[int, list[str]] = {}
    for e in events:
        if e["event"] == "rank" and e["rank"] is not None:
            seen = steps.setdefault(e["rank"], [])
            if not seen or seen[-1] != e["state"]:
                seen.append(e["state"])
    return steps


def all_running(proc: subprocess.Popen[str], world: int = 4) -> list[dict[str, Any]]:
    """Headless events until every one of `world` ranks runs (or the run ends); asserts all ran."""
    running: set[int] = set()

    def enough(e: dict[str, Any]) -> bool:
        if e["event"] == "rank" and e["state"] == "running":
            running.add(e["rank"])
        return len(running) == world or e["event"] == "summary"

    events = read_until(proc, enough)
    assert len(running) == world, events[-5:]
    return events


def sleep_line(script: Path) -> int:
    """The line of trainer/hang.py's sleep, the frame a sleeping rank's stack shows."""
    lines = script.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if "time.sleep(3600)" in line)
