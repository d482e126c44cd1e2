"""An elastic job's run with one node killed, as the SSH and Slurm elastic tests drive it."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.sshrun import TRAINER, read_until
from tests.procs import outputs

# One process a node, no stall watch (a round's restart stands still a while); c10d waits
# `last_call_timeout` (30 s) for more nodes once MIN have joined: short here.
ELASTIC_JOB = (
    "--nproc-per-node", "1", "--rdzv-conf", "last_call_timeout=2", "--hang-timeout", "0",
    "--lines", str(TRAINER / "elastic_ddp.py"), "--steps", "16", "--step-time", "0.5",
)  # fmt: skip


def kill_once_stepping(
    proc: subprocess.Popen[str], state: Path, victim: str, started: int
) -> list[dict[str, Any]]:
    """Once each of the `started` ranks printed its second step, kill `victim`'s agent
    through the run's control file (SIGUSR2); every event to the summary."""
    stepped: set[int] = set()

    def all_stepping(e: dict[str, Any]) -> bool:
        if e["event"] == "line" and e["rank"] is not None and " step=2 " in e["text"]:
            stepped.add(e["rank"])
        return len(stepped) == started or e["event"] == "summary"

    events = read_until(proc, all_stepping)
    assert len(stepped) == started, (events[-5:], proc.stderr and proc.stderr.read())
    return act_then_finish(proc, state, events, f"kill {victim}")


def act_then_finish(
    proc: subprocess.Popen[str], state: Path, events: list[dict[str, Any]], action: str
) -> list[dict[str, Any]]:
    """Do `action` through the run's control file (SIGUSR2), then read every event to the
    summary after `events` (those read so far)."""
    run_id = next(e["run_id"] for e in events if e["event"] == "plan")
    (state / "runs" / run_id / "control").write_text(f"{action}\n")
    proc.send_signal(signal.SIGUSR2)
    out, err = outputs(proc, 400)
    events += [json.loads(line) for line in out.splitlines()]
    assert events[-1]["event"] == "summary", (events[-5:], err[-3000:])
    return events


def last_cycles(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each round as last reported (a later report of a round replaces it)."""
    cycles: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["event"] == "cycle":
            cycles[e["cycle"]["index"]] = e["cycle"]
    return cycles
