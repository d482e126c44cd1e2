"""Provides the testbed side of the benchmarks: hosts, timed output streams, by-hand launches,
and what a job left on the hosts seen from outside (SSH and Slurm).

The hosts are the project's own test harness (testbed/: one network namespace and one real
sshd per host); the console and every alternative run inside the head namespace, as an operator
would run them on a login node.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bench.common.trees import ROOT, TRAINER
from ddptui.core.job.plan import NodeCommand, NodeTarget, build_plan
from ddptui.core.job.spec import make_spec
from testbed import Testbed, cleanup_stale
from testbed.processes import cmdline

ENVCHECK = str(TRAINER / "envcheck.py")


CPU_CGROUP_V1 = Path("/sys/fs/cgroup/cpu")
CPU_CGROUP_V2 = Path("/sys/fs/cgroup")
APART = "ddptui-bench-hosts-apart"


@contextmanager
def hosts_apart(tb: Testbed, hosts: Sequence[str]) -> Iterator[Path]:
    """Every host's sshd, and so all it starts (logins, node helpers, agents, ranks), in a CPU
    cgroup of the lowest weight while inside: the hosts get the CPU the head's processes
    leave, standing for hosts that are other machines. A login calls setsid, which on the
    root cgroup would give it a scheduling group (autogroup) of its own at the same weight as
    the console's, so N hosts starting at once would leave the console a 1/(N+1) share of the
    CPUs; a cgroup keeps them all in one. Needs root and the cpu controller."""
    assert tb.ssh is not None
    if CPU_CGROUP_V1.is_dir():
        group, weight, root = CPU_CGROUP_V1 / APART, ("cpu.shares", "2"), CPU_CGROUP_V1
    elif (CPU_CGROUP_V2 / "cgroup.controllers").is_file():
        (CPU_CGROUP_V2 / "cgroup.subtree_control").write_text("+cpu")
        group, weight, root = CPU_CGROUP_V2 / APART, ("cpu.weight", "1"), CPU_CGROUP_V2
    else:
        raise SystemExit("--hosts-apart needs a cpu cgroup (v1 /sys/fs/cgroup/cpu or v2)")
    group.mkdir(exist_ok=True)
    (group / weight[0]).write_text(weight[1])
    for host in hosts:
        pid = tb.ssh.sshd_pid(host)
        if pid is not None:
            (group / "cgroup.procs").write_text(str(pid))
    try:
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            with suppress(OSError):  # gone meanwhile
                (root / "cgroup.procs").write_text(pid)
        group.rmdir()


def open_testbed(hosts: int) -> Testbed:
    """A fresh testbed with sshd on every host (stale ones of dead runs removed first)."""
    cleanup_stale()
    return Testbed(hosts, sshd=True).start()


def bench_env(state: Path, tree: Path = ROOT) -> dict[str, str]:
    """The environment of a ddptui run: its own state directory, the console of `tree`."""
    return {**os.environ, "DDPTUI_STATE_DIR": str(state), "PYTHONPATH": str(tree)}


def ddptui_ssh_argv(tb: Testbed, *args: str) -> list[str]:
    """`ddptui run --headless --backend ssh` in the head namespace with the testbed's config."""
    assert tb.ssh is not None
    return tb.ns_argv(
        tb.head,
        [
            sys.executable,
            "-m",
            "ddptui.cli",
            "run",
            "--headless",
            "--backend",
            "ssh",
            "--ssh-config",
            str(tb.ssh.ssh_config),
            *args,
        ],
    )


class TimedStream:
    """A child process whose stdout lines are stamped (monotonic) as they arrive."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        merge_stderr: bool = False,
        open_stdin: bool = False,
    ) -> None:
        """`open_stdin` keeps a pipe to the child's stdin open (ssh -tt would see EOF on
        /dev/null and close the remote terminal)."""
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if open_stdin else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.DEVNULL,
        )
        self._lines: queue.Queue[tuple[float, str | None]] = queue.Queue()
        self.seen: list[tuple[float, str]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put((time.monotonic(), line.rstrip("\n")))
        self._lines.put((time.monotonic(), None))

    def until(self, predicate: Callable[[str], bool], timeout: float = 120) -> float | None:
        """Seconds since start when a line satisfied `predicate`; None at EOF or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                stamp, line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                self._lines.put((stamp, None))
                return None
            self.seen.append((stamp, line))
            if predicate(line):
                return stamp - self.t0

    def finish(self, timeout: float = 120) -> int:
        """Wait for the process, reading the rest of its output."""
        self.until(lambda _: False, timeout)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for _, line in self.seen if line.startswith("{")]


def all_ranks_running(world: int) -> Callable[[str], bool]:
    """Predicate over headless JSON lines: true once every rank has a `running` rank event."""
    running: set[int] = set()

    def check(line: str) -> bool:
        if not line.startswith("{"):
            return False
        event = json.loads(line)
        if event["event"] == "rank" and event["state"] == "running":
            running.add(event["rank"])
        return len(running) == world or event["event"] == "summary"

    return check


def all_envcheck_lines(world: int) -> Callable[[str], bool]:
    """Predicate over raw output: true once every rank printed its `envcheck host=` line."""
    seen: set[str] = set()

    def check(line: str) -> bool:
        if "envcheck host=" in line:
            for word in line.split():
                if word.startswith("rank="):
                    seen.add(word)
        return len(seen) == world

    return check


def ssh_commands(
    tb: Testbed, hosts: Sequence[str], nproc: int, port: int, script_args: Sequence[str] = ()
) -> list[NodeCommand]:
    """The exact per-node commands ddptui's SSH backend runs (its own planner, same inputs)."""
    spec = make_spec(
        backend="ssh",
        hosts=tuple(hosts),
        nodes=len(hosts),
        nproc_per_node=nproc,
        script=ENVCHECK,
        script_args=tuple(script_args),
        rdzv_port=port,
    )
    nodes = [NodeTarget(h, tb.host_ip(h)) for h in hosts]
    plan = build_plan(
        spec, nodes, f"byhand{port}", port, socket_ifnames={h: tb.ifname for h in hosts}
    )
    return list(plan.commands)


def by_hand_script(path: Path, lines: Sequence[str]) -> Path:
    """A shell script that starts every line in the background and waits for all of them."""
    body = ["#!/bin/sh", *(f"{line} &" for line in lines), "wait", ""]
    path.write_text("\n".join(body))
    return path


def ssh_argv(tb: Testbed, command: NodeCommand, *, tty: bool = False) -> list[str]:
    """`ssh host 'cd ... && env ... torchrun ...'` as a person would type it."""
    assert tb.ssh is not None
    return [
        "ssh",
        *(["-tt"] if tty else []),
        "-F",
        str(tb.ssh.ssh_config),
        command.node,
        command.shell_line(),
    ]


def ssh_line(tb: Testbed, command: NodeCommand) -> str:
    return shlex.join(ssh_argv(tb, command))


def job_leftovers(tb: Testbed, hosts: Sequence[str]) -> dict[str, list[str]]:
    """Processes still in each host namespace other than sshd (listener or session)."""
    left = {h: [p for p in tb.describe_pids(h) if "sshd" not in p] for h in hosts}
    return {h: p for h, p in left.items() if p}


def wait_clean(
    tb: Testbed, hosts: Sequence[str], timeout: float = 30
) -> tuple[float | None, dict[str, list[str]]]:
    """Seconds until no job process is left on any host (None if still dirty at timeout)."""
    t0 = time.monotonic()
    while True:
        left = job_leftovers(tb, hosts)
        if not left:
            return time.monotonic() - t0, {}
        if time.monotonic() - t0 > timeout:
            return None, left
        time.sleep(0.02)


def slurm_strays(tb: Testbed, where: Sequence[str]) -> dict[str, list[int]]:
    """PIDs in each namespace other than the testbed's daemons (slurmd, slurmctld) and
    slurmctld's own script helper (slurmscriptd, its child, started with the first job)."""
    left = {
        h: [
            pid
            for pid in tb.pids_in(h)
            if not (cmdline(pid) == ": slurmscriptd" and parent_pid(pid) in tb.daemon_pids)
        ]
        for h in where
    }
    return {h: p for h, p in left.items() if p}


def parent_pid(pid: int) -> int:
    """The parent of `pid`, from /proc (0 once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0
