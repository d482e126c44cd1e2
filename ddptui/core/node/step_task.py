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

from ddptui.core.node.netinfo import port_report  # sent ahead of this program

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
    _mark(f"gpu {int(_may_have_gpu())}")
    ifname = _ifname_holding(entry["ifname_for"]) if entry.get("ifname_for") else None
    taken = _port_taken(*entry["port_check"]) if entry.get("port_check") else None
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


# What netinfo.py finds, with the C modules alone (_socket, not socket: its import of enum
# and selectors, and shutil's of fnmatch and re, cost every node's task tens of ms of CPU
# while the job starts, 64 nodes' worth on a shared login host or test machine).


def _may_have_gpu() -> bool:
    if os.path.exists("/dev/nvidiactl"):
        return True
    paths = os.environ.get("PATH", "").split(os.pathsep)
    return any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in paths if d)


def _ifname_holding(address: str) -> str | None:
    """The interface that holds `address` here, if one does (SIOCGIFADDR per interface)."""
    import _socket
    import fcntl

    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        for _, name in _socket.if_nameindex():
            request = name[:15].encode().ljust(256, b"\0")
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, request)
            except OSError:
                continue
            if _socket.inet_ntoa(packed[20:24]) == address:
                return str(name)
    finally:
        s.close()
    return None


def _port_taken(address: str, port: int) -> str | None:
    """Why the rendezvous port cannot be bound here (as c10d's store binds it: who holds it,
    where that can be told), else None."""
    report = port_report(address, port)
    if report["free"]:
        return None
    why = str(report["why"])
    if report.get("holders"):
        return why
    return why.removeprefix("not available (").removesuffix(")")


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
