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
import shutil
import signal
import sys

from ddptui.core.node.netinfo import start_checks  # sent ahead of this program

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
    # What a probe step before this one used to find out (a whole srun step of its own):
    # whether the node may have a GPU, the interface holding its address, and on the first
    # node whether the rendezvous port can be bound.
    gpu = os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None
    _mark(f"gpu {int(gpu)}")
    taken, ifname = start_checks(entry.get("port_check"), entry.get("ifname_for"))
    if ifname:
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            env.setdefault(name, ifname)
    if taken is not None:
        port = entry["port_check"][1]
        os.write(
            1,
            f"ddptui: rendezvous port {port} on {node} is not available ({taken}): "
            "choose another with --rdzv-port\n".encode(),
        )
        _mark("exit 1")
        _stop_step()
        return 1
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


def _stop_step() -> None:
    """The other nodes would wait in the rendezvous for a head that never starts: the
    step's tasks are signalled (every process of the step, through Slurm)."""
    import contextlib
    import subprocess

    step = f"{os.environ.get('SLURM_JOB_ID', '')}.{os.environ.get('SLURM_STEP_ID', '')}"
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["scancel", "--signal=TERM", step], timeout=30, check=False)


if __name__ == "__main__":
    sys.exit(task(JOB))
