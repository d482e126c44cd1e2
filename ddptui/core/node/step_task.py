"""Provides the task of one Slurm step for every node (see step.py): run this node's command.

A program of its own, sent by srun on every task's stdin (`python3 -S -`), kept small: every
node compiles it while the job starts. JOB holds the table of every node's command and the
environment it adds ({"nodes": {NAME: {"argv", "env"}}}); this task looks its node up by
SLURMD_NODENAME, prints a start mark, runs the command, and prints an exit mark with the
command's exit code, which the console's side turns into that node's exit file.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys

JOB = ""  # the console puts the job here (base64 JSON), never on the command line

MARK = b"\x1eddptui-step "  # the same as step.MARK


def _mark(text: str) -> None:
    os.write(1, MARK + text.encode() + b"\n")


def task(job_text: str) -> int:
    """srun's task on a node: its node's command from the table, then its exit mark.

    SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2 reach the command from Slurm (every process of
    the step is signalled); this process outlives them to report the command's exit code.
    The command (a torchrun agent) starts with USR1/USR2 ignored: their default would end
    the agent and orphan its workers, and it does not forward them; a worker that installs
    its own handler (a checkpoint before preemption) still gets them, straight from Slurm.
    """
    table = json.loads(base64.b64decode(job_text).decode())
    node = os.environ.get("SLURMD_NODENAME", "")
    _mark(f"node {node}")
    entry = table["nodes"].get(node)
    if entry is None:
        os.write(1, f"ddptui: node {node} has no command in this step\n".encode())
        _mark("exit 127")
        return 127
    env = dict(os.environ)
    env.update(entry["env"])
    argv = list(entry["argv"])
    passed = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
    for sig in passed:
        signal.signal(sig, lambda *_: None)  # caught, not ignored: exec resets it
    pid = os.fork()
    if pid == 0:
        try:
            for sig in (signal.SIGUSR1, signal.SIGUSR2):
                signal.signal(sig, signal.SIG_IGN)  # kept across exec: see above
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(2, f"ddptui: cannot start {argv[0]}: {exc.strerror}\n".encode())
        os._exit(127)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    _mark(f"exit {code}")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(task(JOB))
