"""Provides how a torchrun agent ended when nothing that waited for it lived to say: read
from the end of its log.

The process that starts the agent and waits for it records its exit: the job helper's
supervisor (local, SSH), a Slurm step's task (step_task.sh's exit mark). When that process
is killed while the agent runs on, the agent's end is nobody's record; its log still says
how it went. Sent ahead of step.py and job_helper.py. Standard library only.
"""

from __future__ import annotations

import os

AGENT_DONE = b"Done waiting for other agents"  # torchrun's last line after a success
AGENT_FAILED = b"ChildFailedError"  # torchrun's report of a failed worker, as it exits 1


def read_from_log(who: str, code: int) -> str:
    """The node log's last line when the agent's exit is read from it: who was killed."""
    return (
        f"ddptui: the node's {who} was killed and the job's command has ended: its exit, "
        f"never recorded, is taken from its log as {code}\n"
    )


def exit_from_log(log_path: str, otherwise: int = -9) -> int:
    """The exit code of a torchrun agent whose end nobody recorded, from its log's end: 0
    after its success's last line, 1 after a worker's failure report, else `otherwise` (it
    ended without a word: killed with what waited for it)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - (1 << 16)))
            end = f.read()
    except OSError:
        return otherwise
    if AGENT_FAILED in end:
        return 1
    return 0 if AGENT_DONE in end else otherwise
