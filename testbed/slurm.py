"""A real Slurm 22.05 cluster on a Testbed: munged, slurmctld in the head namespace and
one slurmd per host namespace.

Why: the console submits/cancels torchrun jobs through the Slurm CLI; a real
controller and real node daemons exercise srun/salloc/sbatch/scancel/squeue for real.
Every path (state, spool, logs, pids, munge socket/key) lives under the testbed's
private work dir, so nothing touches the machine's own Slurm or munge setup.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .commands import TestbedError
from .processes import terminate, wait_gone

if TYPE_CHECKING:
    from .netns import Testbed

SLURM_TOOLS = (
    "munged",
    "slurmctld",
    "slurmd",
    "srun",
    "sinfo",
    "squeue",
    "scancel",
    "salloc",
    "sbatch",
    "scontrol",
)


class SlurmCluster:
    """Context manager: starts munge + slurmctld + slurmd on every testbed host.

    Clients must run in the head namespace with ``SLURM_CONF`` set: use ``run()`` or
    ``argv()`` + ``env``.  ``env`` is a full environment (os.environ + SLURM_CONF), so
    jobs get the submitter's PATH (this Python's python3/torchrun) via srun's default
    ``--export=ALL``.
    """

    def __init__(
        self,
        testbed: Testbed,
        *,
        cpus: int = 4,
        partition: str = "debug",
        kill_wait: int = 5,
        extra_conf: Sequence[str] = (),
    ) -> None:
        self.tb = testbed
        self.cpus = cpus
        self.partition = partition
        self.kill_wait = kill_wait
        self.extra_conf = list(extra_conf)
        self.dir = testbed.workdir / "slurm"
        self.slurm_conf = self.dir / "slurm.conf"
        self.munge_socket = self.dir / "munge" / "munge.socket.2"
        self.nodes: list[str] = list(testbed.hosts)
        self.env: dict[str, str] = {**os.environ, "SLURM_CONF": str(self.slurm_conf)}
        self._procs: list[subprocess.Popen[Any]] = []
        self._logs: list[IO[bytes]] = []
        self.slurmd_pids: dict[str, int] = {}

    # -------------------------------------------------------------- lifecycle
    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60) -> SlurmCluster:
        missing = [t for t in SLURM_TOOLS if shutil.which(t) is None]
        if missing:
            raise TestbedError(
                f"missing Slurm/munge tools: {missing} (apt-get install "
                "slurmctld slurmd slurm-client munge)"
            )
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            for sub in ("state", "spool", "log"):
                (self.dir / sub).mkdir(exist_ok=True)
            self._start_munge()
            self.slurm_conf.write_text(self._conf())
            self._start_slurmctld()
            for node in self.nodes:
                self._start_slurmd(node)
            self.wait_idle(timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop slurmd, slurmctld, munged (by PID, in that order); leave nothing behind."""
        for p in reversed(self._procs):
            terminate(p.pid)
            wait_gone([p.pid], self._procs, grace=5)
            self.tb.daemon_pids.discard(p.pid)
        self._procs.clear()
        self.slurmd_pids.clear()
        for f in self._logs:
            f.close()
        self._logs.clear()

    # ------------------------------------------------------------------ munge
    def _start_munge(self) -> None:
        mdir = self.munge_socket.parent
        mdir.mkdir(parents=True, exist_ok=True)
        munge = pwd.getpwnam("munge")
        key = mdir / "munge.key"
        key.write_bytes(os.urandom(1024))
        for path in (mdir, key):
            os.chown(path, munge.pw_uid, munge.pw_gid)
        os.chmod(key, 0o400)
        os.chmod(mdir, 0o755)  # munged refuses a socket dir without o+x
        log = self._log("munged.log")
        p = subprocess.Popen(
            [
                "munged",
                "--foreground",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={mdir / 'munged.pid'}",
                f"--log-file={mdir / 'munged.log'}",
                f"--seed-file={mdir / 'munged.seed'}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            user=munge.pw_uid,
            group=munge.pw_gid,
            extra_groups=[],
        )  # Popen pid == munged pid
        self._track(p)
        self._wait(lambda: self.munge_socket.is_socket(), 10, "munged socket", mdir / "munged.log")

    # ----------------------------------------------------------------- slurm
    def _conf(self) -> str:
        d, tb = self.dir, self.tb
        lines = [
            f"ClusterName={tb.prefix.replace('-', '')}",
            f"SlurmctldHost={tb.head}({tb.head_ip})",
            "SlurmctldPort=6817",
            "SlurmdPort=6818",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'spool'}/slurmd.%n.pid",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'log'}/slurmd.%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",  # declared CPUs win over the 2 real cores
            f"KillWait={self.kill_wait}",
            "InactiveLimit=0",
            "MessageTimeout=10",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            *self.extra_conf,
        ]
        for node in self.nodes:
            lines.append(
                f"NodeName={node} NodeAddr={tb.host_ip(node)} CPUs={self.cpus} State=UNKNOWN"
            )
        lines.append(
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
        )
        return "\n".join(lines) + "\n"

    def _nsenter_argv(self, where: str, name: str, daemon_argv: Sequence[str]) -> list[str]:
        """nsenter + private UTS/mount ns; `ip netns exec` remounts /sys, which kills
        slurmd 22.05 ("Unable to initialize cgroup plugin"), so bind /etc/hosts ourselves."""
        script = (
            f"mount --bind {shlex.quote(str(self.tb.hosts_file(where)))} /etc/hosts && "
            f"hostname {shlex.quote(name)} && exec {shlex.join(daemon_argv)}"
        )
        return [
            "nsenter",
            f"--net={self.tb.ns_path(where)}",
            "unshare",
            "--uts",
            "--mount",
            "sh",
            "-c",
            script,
        ]

    def _start_slurmctld(self) -> None:
        log = self._log("slurmctld.stderr")
        argv = self._nsenter_argv(
            self.tb.head, self.tb.head, ["slurmctld", "-D", "-i", "-f", str(self.slurm_conf)]
        )
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env)
        self._track(p)

        def up() -> bool:
            return "UP" in self.run(["scontrol", "ping"], check=False, timeout=15).stdout

        self._wait(up, 30, "slurmctld to answer", self.dir / "log" / "slurmctld.log")

    def _start_slurmd(self, node: str) -> None:
        log = self._log(f"slurmd.{node}.stderr")
        argv = self._nsenter_argv(
            node, node, ["slurmd", "-D", "-f", str(self.slurm_conf), "-N", node]
        )
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env)
        self._track(p)
        self.slurmd_pids[node] = p.pid

    def node_states(self) -> dict[str, str]:
        """Node name -> state as sinfo prints it (idle, alloc, mix, down*, ...)."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=15).stdout
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def wait_idle(self, timeout: float = 60) -> None:
        """Block until sinfo shows every node idle (an earlier srun just queues)."""

        def ready() -> bool:
            states = self.node_states()
            return all(states.get(n) == "idle" for n in self.nodes)

        self._wait(ready, timeout, "all nodes idle", self.dir / "log" / "slurmctld.log")

    # ---------------------------------------------------------------- client
    def argv(self, argv: Sequence[str]) -> list[str]:
        """argv that runs a Slurm client in the head namespace (pass env=self.env)."""
        return self.tb.ns_argv(self.tb.head, argv)

    def run(
        self, argv: Sequence[str], *, check: bool = True, timeout: float = 60, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm CLI command from the head namespace with SLURM_CONF set."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return self.tb.run(
            self.tb.head,
            argv,
            check=check,
            timeout=timeout,
            env={**self.env, **kwargs.pop("env", {})},
            **kwargs,
        )

    def squeue_ids(self) -> list[str]:
        """Job ids squeue still lists (pending/running/completing)."""
        out = self.run(["squeue", "-h", "-o", "%i"], timeout=15).stdout
        return out.split()

    def squeue_json(self) -> list[dict[str, Any]]:
        return list(json.loads(self.run(["squeue", "--json"], timeout=15).stdout)["jobs"])

    # --------------------------------------------------------------- helpers
    def _log(self, name: str) -> IO[bytes]:
        f = open(self.dir / "log" / name, "ab")  # noqa: SIM115 - kept open for the daemon
        self._logs.append(f)
        return f

    def _track(self, p: subprocess.Popen[Any]) -> None:
        self._procs.append(p)
        self.tb.track(p, daemon=True)

    def _wait(self, cond: Any, timeout: float, what: str, logpath: Path) -> None:
        """Poll cond(); fail early (with the log tail) if one of our daemons died."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p.args for p in self._procs if p.poll() is not None]
            if dead:
                what += f" (daemon exited: {dead[0]!r})"
                break
            if cond():
                return
            time.sleep(0.1)
        tail = logpath.read_text(errors="replace")[-3000:] if logpath.exists() else "(no log)"
        raise TestbedError(f"timed out waiting for {what} (slurm dir {self.dir}):\n{tail}")
