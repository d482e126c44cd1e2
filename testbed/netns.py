"""Isolated multi-host network built from Linux network namespaces.

Why: the console under test talks to "nodes" over SSH/Slurm; real separate hosts are
simulated by one network namespace per node, all wired to a bridge that lives in a
namespace of its own, with no default route anywhere, so no packet can leave the
test subnet.
"""

from __future__ import annotations

import ctypes
import ipaddress
import itertools
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .commands import TestbedError, check_prerequisites, ip_batch_checked, setup_command
from .iproute import fit_neighbour_table, mac_of, neighbours
from .netns_files import hosts_text, plain_passwd
from .processes import cmdline, pids_by_netns, pids_in_netns, terminate, wait_gone
from .users import PlainUser, needed_paths, view_commands, yama_commands

ROOT = Path(__file__).resolve().parents[1]

IFNAME = "eth0"  # interface name inside every host/head namespace
_COUNTER = itertools.count()
MAX_HOSTS_24 = 200
MAX_HOSTS_16 = 1000  # a Linux bridge takes at most 1024 ports
_CLONE_NEWNET = 0x40000000


class Testbed:
    """A bridge namespace, N host namespaces and a head namespace on a private /24 (a /16
    beyond 200 hosts, up to 1,000).

    Addresses: head is the subnet's address + 2, host i (1-based) its address + 10 + i.
    Inside every host/head namespace the interface is ``eth0``; the bridge ports are
    ``p-<ns suffix>``.
    """

    __test__ = False

    def __init__(
        self,
        hosts: int | Sequence[str] = 3,
        *,
        prefix: str | None = None,
        subnet: str | None = None,
        head_name: str = "head",
        sshd: bool = False,
        workdir: str | None = None,
        keep_workdir: bool = False,
        plain_login: bool = True,
        user: bool = False,
    ) -> None:
        """hosts: count (node1..nodeN) or host names.  workdir: private dir for keys,
        configs and logs (default: a fresh /tmp/<prefix>-* removed at close unless
        keep_workdir; a dir you pass is never removed).  plain_login (the default): root's
        home on the hosts is an empty directory of the testbed (`login_home`), so an SSH
        command runs no .bashrc: this machine's root runs `pyenv init` there, 0.1-0.3 s of CPU
        per command (at hundreds of hosts all that gets measured), and its `pyenv rehash`
        takes a lock file that a login killed mid-way (a teardown, a reset) leaves behind,
        after which every login waits 60 s for it.  user: an unprivileged user of the
        testbed's own in every namespace, this machine's Python within its reach, and Yama's
        ptrace_scope 1 (users.py); its sshd sessions and `enter_argv` commands see that."""
        n = next(_COUNTER)
        pid = os.getpid()
        self.prefix = prefix or (f"dt{pid}" if n == 0 else f"dt{pid}x{n}")
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,20}", self.prefix):
            raise TestbedError(f"bad prefix {self.prefix!r}: use [a-z0-9-], <= 21 chars")
        names = [f"node{i}" for i in range(1, hosts + 1)] if isinstance(hosts, int) else list(hosts)
        if subnet is None:
            seed = pid * 7 + n
            if len(names) <= MAX_HOSTS_24:
                subnet = f"10.{(seed >> 8) % 250 + 1}.{seed % 256}.0/24"
            else:  # testbeds are isolated from each other: overlapping subnets do not meet
                subnet = f"10.{seed % 250 + 1}.0.0/16"
        net = ipaddress.IPv4Network(subnet)
        if net.prefixlen not in (16, 24) or not net.subnet_of(ipaddress.IPv4Network("10.0.0.0/8")):
            raise TestbedError(f"subnet must be a 10.x.y.0/24 or a 10.x.0.0/16, got {subnet}")
        self.subnet = str(net)
        self._prefixlen = net.prefixlen
        cap = MAX_HOSTS_24 if net.prefixlen == 24 else MAX_HOSTS_16
        if not names or len(set(names)) != len(names) or head_name in names or len(names) > cap:
            raise TestbedError(
                f"bad host names {names[:5]!r}... ({len(names)}, at most {cap} on {subnet}; "
                f"head {head_name!r})"
            )
        self.hosts: list[str] = names
        self.head = head_name
        self.bridge_ns = f"{self.prefix}-br"
        self._ns = {name: f"{self.prefix}-h{i}" for i, name in enumerate(names, 1)}
        self._ns[head_name] = f"{self.prefix}-head"
        first = net.network_address
        self._ip = {name: str(first + 10 + i) for i, name in enumerate(names, 1)}
        self._ip[head_name] = str(first + 2)
        self.head_ns = self._ns[head_name]
        self.ifname = IFNAME
        self._want_sshd = sshd
        self.plain_login = plain_login
        self.login_home = Path("/nonexistent")  # root's home on the hosts (start)
        self._want_user = user
        self.user: PlainUser | None = None
        self._view: list[str] = []
        self._workdir_arg = workdir
        self.keep_workdir = keep_workdir
        self.workdir: Path = Path("/nonexistent")
        self._created_ns: list[str] = []
        self._procs: list[subprocess.Popen[Any]] = []
        self.daemon_pids: set[int] = set()
        self.leftovers: list[tuple[int, str]] = []
        self.ssh: Any = None  # sshd.SshServers when sshd=True
        self._started = False

    # ----------------------------------------------------------------- naming
    def ns(self, where: str) -> str:
        """Namespace name for a host name, the head name, or one of our ns names."""
        if where in self._ns:
            return self._ns[where]
        if where in self._ns.values() or where == self.bridge_ns:
            return where
        raise TestbedError(f"{where!r} is not a host or namespace of testbed {self.prefix}")

    def ns_path(self, where: str) -> str:
        return f"/run/netns/{self.ns(where)}"

    def host_ip(self, name: str) -> str:
        return self._ip[name]

    @property
    def head_ip(self) -> str:
        return self._ip[self.head]

    @property
    def namespaces(self) -> list[str]:
        return [self.bridge_ns, *self._ns.values()]

    def bridge_port(self, name: str) -> str:
        return "p-" + self._ns[name][len(self.prefix) + 1 :]

    def hosts_file(self, where: str) -> Path:
        return Path("/etc/netns") / self.ns(where) / "hosts"

    # -------------------------------------------------------------- lifecycle
    def __enter__(self) -> Testbed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Testbed:
        """Build namespaces, bridge, veths, hosts files (and sshd if asked)."""
        check_prerequisites()
        self._started = True
        try:
            self.workdir = Path(self._workdir_arg or tempfile.mkdtemp(prefix=f"{self.prefix}-"))
            self.workdir.mkdir(parents=True, exist_ok=True)
            os.chmod(self.workdir, 0o755)  # munge/slurm users must traverse it
            if self._want_user:
                self.user = PlainUser.create(self.workdir)
                self._view = view_commands(needed_paths(ROOT), self.workdir / "view")
                self._view += yama_commands(self.workdir / "view")  # a node restricting ptrace
            self._build_network()
            if self._want_sshd:
                from .sshd import SshServers

                self.ssh = SshServers(self)
                self.ssh.start()
        except BaseException:
            self.close()
            raise
        return self

    def _build_network(self) -> None:
        """One `ip -batch` for the namespaces and veth pairs, one per namespace for its
        addresses: three processes plus one per host instead of five per host."""
        fit_neighbour_table(len(self._ns))
        existing = set(setup_command(["ip", "netns", "list"]).split())
        clash = [ns for ns in self.namespaces if ns in existing]
        if clash:
            raise TestbedError(f"namespaces already exist: {clash} (stale testbed? prefix clash?)")
        br = self.bridge_ns
        self._created_ns = list(self.namespaces)
        links = [f"netns add {ns}" for ns in self.namespaces]
        links += [
            f"link add {IFNAME} netns {ns} address {mac_of(self._ip[name])} type veth "
            f"peer name {self.bridge_port(name)} netns {br}"
            for name, ns in self._ns.items()
        ]
        ip_batch_checked(None, links)
        ports = ["link set lo up", "link add br0 type bridge stp_state 0", "link set br0 up"]
        ports += [f"link set {self.bridge_port(name)} master br0 up" for name in self._ns]
        ip_batch_checked(br, ports)
        machine = socket.gethostname()
        self.login_home = self.workdir / "home-root" if self.plain_login else Path.home()
        passwd = plain_passwd(self.login_home) if self.plain_login else None
        head = [self._ip[self.head]]
        hosts = [ip for name, ip in self._ip.items() if name != self.head]
        for name, ns in self._ns.items():
            ip_batch_checked(
                ns,
                [
                    "link set lo up",
                    f"addr add {self._ip[name]}/{self._prefixlen} dev {IFNAME}",
                    f"link set {IFNAME} up",
                    *neighbours(hosts if name == self.head else head, IFNAME),
                ],
            )
            d = Path("/etc/netns") / ns
            d.mkdir(parents=True, exist_ok=True)
            extra = {name: machine} if machine not in self._ip else {}
            (d / "hosts").write_text(hosts_text(self._ip, extra))
            (d / "resolv.conf").write_text("# testbed: no DNS inside the test network\n")
            if passwd is not None and name != self.head:
                (d / "passwd").write_text(passwd)
            if self.user is not None:
                base = passwd if name != self.head else None
                (d / "passwd").write_text(self.user.passwd(base))
                (d / "group").write_text(self.user.group())

    def close(self) -> None:
        """Stop what we started (by PID), kill leftovers in our namespaces, delete all."""
        if not self._started:
            return
        self._started = False
        if self.ssh is not None:
            self.ssh.stop()
        for p in self._procs:
            terminate(p.pid)
        wait_gone([p.pid for p in self._procs], self._procs)
        by_ns = pids_by_netns([f"/run/netns/{ns}" for ns in self._created_ns])
        stray = sorted({pid for pids in by_ns.values() for pid in pids})
        self.leftovers = [(pid, cmdline(pid)) for pid in stray]
        for pid in stray:
            terminate(pid)
        wait_gone(stray, self._procs)
        subprocess.run(
            ["ip", "-force", "-batch", "-"],
            input="".join(f"netns del {ns}\n" for ns in reversed(self._created_ns)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        for ns in self._created_ns:
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self._created_ns.clear()
        if not self.keep_workdir and self._workdir_arg is None and self.workdir.is_dir():
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --------------------------------------------------------------- commands
    def ns_argv(self, where: str, argv: Sequence[str], *, set_hostname: bool = False) -> list[str]:
        """argv that runs `argv` inside a namespace (with /etc/netns/NS files bound)."""
        ns = self.ns(where)
        inner = list(argv)
        if set_hostname:
            name = next(k for k, v in self._ns.items() if v == ns)
            inner = ["unshare", "--uts", "sh", "-c", f'hostname {name} && exec "$@"', "sh", *inner]
        return ["ip", "netns", "exec", ns, *inner]

    def enter_argv(self, where: str, argv: Sequence[str]) -> list[str]:
        """Like ns_argv, but keeping this machine's /sys: `ip netns exec` mounts a fresh
        sysfs, which hides the cgroup mounts that podman's runc needs ("no cgroup mount
        found"). The /etc/netns/NS files are bound over /etc as `ip netns exec` does."""
        ns = self.ns(where)
        binds = [
            f"mount --bind {f} /etc/{f.name}"
            for f in sorted((Path("/etc/netns") / ns).glob("*"))
            if (Path("/etc") / f.name).exists()
        ]
        script = " && ".join([*binds, *self._view, 'exec "$@"'])
        return [
            "nsenter",
            f"--net={self.ns_path(where)}",
            "unshare",
            "--mount",
            "sh",
            "-c",
            script,
            "sh",
            *argv,
        ]

    def exec(
        self,
        where: str,
        argv: Sequence[str],
        *,
        set_hostname: bool = False,
        daemon: bool = False,
        **popen_kwargs: Any,
    ) -> subprocess.Popen[Any]:
        """Start a process inside a namespace; it is stopped (by PID) at teardown."""
        p = subprocess.Popen(self.ns_argv(where, argv, set_hostname=set_hostname), **popen_kwargs)
        self.track(p, daemon=daemon)
        return p

    def track(self, p: subprocess.Popen[Any], *, daemon: bool = False) -> None:
        """Remember a process for teardown; daemons are excluded from pids_in()."""
        self._procs.append(p)
        if daemon:
            self.daemon_pids.add(p.pid)

    def run(
        self,
        where: str,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 60,
        set_hostname: bool = False,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command to completion inside a namespace, capturing text output."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        cp = subprocess.run(
            self.ns_argv(where, argv, set_hostname=set_hostname), timeout=timeout, **kwargs
        )
        if check and cp.returncode != 0:
            raise TestbedError(
                f"[{where}] {' '.join(argv)} -> {cp.returncode}\n"
                f"stdout: {cp.stdout}\nstderr: {cp.stderr}"
            )
        return cp

    def pids_in(self, where: str, *, include_daemons: bool = False) -> list[int]:
        """PIDs living in a namespace; by default without the harness's own daemons
        (sshd listeners, slurmd), so tests can assert "nothing left on that host"."""
        pids = pids_in_netns(self.ns_path(where))
        if include_daemons:
            return pids
        return [p for p in pids if p not in self.daemon_pids]

    def describe_pids(self, where: str, **kw: Any) -> list[str]:
        return [f"{pid} {cmdline(pid)}" for pid in self.pids_in(where, **kw)]

    def left_on(self, hosts: list[str]) -> dict[str, list[str]]:
        """Processes other than sshd still living in each host namespace (hosts with none
        left out)."""
        left = {h: [p for p in self.describe_pids(h) if "sshd" not in p] for h in hosts}
        return {h: p for h, p in left.items() if p}

    def wait_clean(self, hosts: list[str], timeout: float = 10) -> dict[str, list[str]]:
        """What is still left on the hosts once they are clean, or after `timeout`."""
        deadline = time.monotonic() + timeout
        while (left := self.left_on(hosts)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def reset(self) -> list[str]:
        """Undo a test's damage: links up, sshd running, stray processes in the host
        and head namespaces killed (by PID).  Returns what was killed (diagnostics)."""
        for host in self.hosts:
            self.restore_link(host)
            if self.ssh is not None:
                self.ssh.start_sshd(host)
        stray = [pid for name in [*self.hosts, self.head] for pid in self.pids_in(name)]
        killed = [f"{pid} {cmdline(pid)}" for pid in stray]
        for pid in stray:
            terminate(pid)
        wait_gone(stray, self._procs)
        return killed

    # ---------------------------------------------------------------- faults
    def cut_link(self, host: str) -> None:
        """Silently drop all traffic to/from a host (bridge port down: no RST, timeouts)."""
        setup_command(["ip", "-n", self.bridge_ns, "link", "set", self.bridge_port(host), "down"])

    def restore_link(self, host: str) -> None:
        setup_command(["ip", "-n", self.bridge_ns, "link", "set", self.bridge_port(host), "up"])

    @contextmanager
    def entered(self, where: str) -> Iterator[None]:
        """Move the *calling thread* into a namespace (sockets it creates live there).

        Why: lets in-process client code (e.g. asyncssh in a test's event loop) connect
        from the head namespace.  Only the network namespace changes: /etc/hosts is the
        machine's, so connect by IP or via the generated ssh_config's HostName lines.
        """
        libc = ctypes.CDLL(None, use_errno=True)
        with open("/proc/thread-self/ns/net") as old, open(self.ns_path(where)) as new:
            if libc.setns(new.fileno(), _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns failed")
            try:
                yield
            finally:
                if libc.setns(old.fileno(), _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back failed")
