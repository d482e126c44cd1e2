"""Real OpenSSH servers, one per host namespace, with testbed-private keys.

Why: the console launches torchrun over SSH; testing against a real sshd catches what
mocks miss (host key checking, auth, exit codes, connection loss).

PATH choice: sshd_config's server-side ``SetEnv PATH=...`` (OpenSSH >= 8.7) puts the
Python running the tests (its bin dir holds python3 and torchrun) first on PATH for every
session, so commands do not depend on root's ~/.bashrc running ``pyenv init``
(that still runs and costs ~100 ms per command, but is no longer needed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from .commands import TestbedError
from .containers import podman_env_words
from .dockerd import host_docker_env
from .namespaces import HostNamespaces

SSHD = "/usr/sbin/sshd"
SSH_TOOLS = ("ssh", "ssh-keygen", SSHD)


def session_path() -> str:
    """PATH that sessions get: this Python's bin dir first, then ours."""
    first = str(Path(sys.executable).parent)
    rest = [
        p
        for p in os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":")
        if p and p != first
    ]
    for p in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if p not in rest:
            rest.append(p)
    return ":".join([first, *rest])


def _keygen(path: Path, comment: str) -> str:
    """Generate an ed25519 key pair; return the public key line."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return path.with_suffix(".pub").read_text().strip()


class SshServers:
    """sshd in every host namespace, plus client key, known_hosts and ssh_config."""

    def __init__(self, testbed: HostNamespaces) -> None:
        self.tb = testbed
        self.dir = testbed.workdir / "ssh"
        self.client_key = self.dir / "id_ed25519"
        self.authorized_keys = self.dir / "authorized_keys"
        self.known_hosts = self.dir / "known_hosts"
        self.ssh_config = self.dir / "ssh_config"
        self.host_pubkeys: dict[str, str] = {}
        self.path_env = session_path()
        self._procs: dict[str, subprocess.Popen[Any]] = {}
        self._logs: dict[str, IO[bytes]] = {}
        self._log_offset: dict[str, int] = {}

    # ---------------------------------------------------------------- setup
    def start(self) -> None:
        missing = [t for t in SSH_TOOLS if shutil.which(t) is None]
        if missing:
            raise TestbedError(
                f"missing OpenSSH tools: {missing} (apt-get install openssh-server openssh-client)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation dir
        pub = _keygen(self.client_key, f"testbed-client@{self.tb.prefix}")
        if self.tb.user is not None:  # sshd reads it as the user: a directory it may enter
            self.authorized_keys = self.tb.workdir / "ssh-public" / "authorized_keys"
            self.authorized_keys.parent.mkdir(mode=0o755, exist_ok=True)
        self.authorized_keys.write_text(pub + "\n")
        for host in self.tb.hosts:
            hd = self.dir / host
            hd.mkdir(exist_ok=True)
            key = _keygen(hd / "ssh_host_ed25519_key", f"{host}@{self.tb.prefix}")
            self.host_pubkeys[host] = " ".join(key.split()[:2])
            (hd / "sshd_config").write_text(self._sshd_config(host))
        self.write_known_hosts(self.known_hosts)
        self.write_ssh_config(self.ssh_config)
        for host in self.tb.hosts:
            self._spawn(host)
        for host in self.tb.hosts:
            self._wait_listening(host)

    def _sshd_config(self, host: str) -> str:
        hd = self.dir / host
        docker = " ".join(f"{k}={v}" for k, v in host_docker_env(self.tb.workdir, host).items())
        return "\n".join(
            [
                "Port 22",
                f"ListenAddress {self.tb.host_ip(host)}",
                f"HostKey {hd / 'ssh_host_ed25519_key'}",
                "PidFile none",
                f"AuthorizedKeysFile {self.authorized_keys}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "StrictModes no",
                "UsePAM no",
                "UseDNS no",
                "PrintMotd no",
                "PrintLastLog no",
                "X11Forwarding no",
                "MaxStartups 64:30:128",
                "MaxSessions 64",
                "AcceptEnv LANG LC_*",
                # podman's private store and settings for the tests (see containers.py), and
                # this host's own dockerd (see dockerd.py; only the first SetEnv line counts)
                f"SetEnv PATH={self.path_env} {podman_env_words()} {docker}",
                "Subsystem sftp internal-sftp",
                "LogLevel INFO",
                "",
            ]
        )

    def write_known_hosts(
        self, path: Path, *, missing: Iterable[str] = (), wrong_key: Iterable[str] = ()
    ) -> Path:
        """known_hosts for all hosts; `missing` hosts left out, `wrong_key` hosts get a
        freshly generated (non-matching) key, to test unknown/changed host keys."""
        missing, wrong_key = set(missing), set(wrong_key)
        lines = []
        for host in self.tb.hosts:
            if host in missing:
                continue
            key = self.host_pubkeys[host]
            if host in wrong_key:
                tmp = self.dir / f"wrong-{host}-{time.monotonic_ns()}"
                key = " ".join(_keygen(tmp, "wrong").split()[:2])
            lines.append(f"{host},{self.tb.host_ip(host)} {key}")
        path.write_text("\n".join(lines) + "\n")
        return path

    def known_hosts_without(self, host: str) -> Path:
        """A known_hosts file that lacks `host` (the "unknown host key" case)."""
        return self.write_known_hosts(self.dir / f"known_hosts.without-{host}", missing=[host])

    def write_ssh_config(self, path: Path, *, known_hosts: Path | None = None) -> Path:
        """Client config: Host entry per host name (HostName = its IP), strict checking."""
        blocks = [f"Host {h}\n  HostName {self.tb.host_ip(h)}\n" for h in self.tb.hosts]
        blocks.append(
            "\n".join(
                [
                    "Host *",
                    "  User root",
                    f"  IdentityFile {self.client_key}",
                    "  IdentitiesOnly yes",
                    f"  UserKnownHostsFile {known_hosts or self.known_hosts}",
                    "  GlobalKnownHostsFile /dev/null",
                    "  StrictHostKeyChecking yes",
                    "  CheckHostIP no",
                    "  BatchMode yes",
                    "  ConnectTimeout 5",
                    "  LogLevel ERROR",
                    "",
                ]
            )
        )
        path.write_text("\n".join(blocks))
        return path

    # ------------------------------------------------------------ lifecycle
    def _spawn(self, host: str) -> None:
        cfg = self.dir / host / "sshd_config"
        log = open(self.dir / host / "sshd.log", "ab")  # noqa: SIM115 - kept open for sshd
        self._logs[host] = log
        self._log_offset[host] = log.tell()
        # nsenter rather than `ip netns exec`: the sessions keep /sys, so podman runs there
        argv = ["unshare", "--uts", "sh", "-c", f"hostname {host} && exec {SSHD} -D -e -f {cfg}"]
        p = subprocess.Popen(
            self.tb.enter_argv(host, argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
        self.tb.track(p, daemon=True)
        self._procs[host] = p

    def _wait_listening(self, host: str, timeout: float = 10) -> None:
        logpath = self.dir / host / "sshd.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(logpath, "rb") as f:
                f.seek(self._log_offset[host])
                text = f.read().decode(errors="replace")
            if "Server listening on" in text:
                return
            if self._procs[host].poll() is not None:
                break
            time.sleep(0.01)
        raise TestbedError(f"sshd on {host} did not start:\n{logpath.read_text(errors='replace')}")

    def sshd_pid(self, host: str) -> int | None:
        p = self._procs.get(host)
        return p.pid if p is not None and p.poll() is None else None

    def stop_sshd(self, host: str) -> None:
        """Stop the listening sshd (like `systemctl stop ssh`: open sessions survive)."""
        p = self._procs.get(host)
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
        self.tb.daemon_pids.discard(p.pid)

    def start_sshd(self, host: str) -> None:
        if self.sshd_pid(host) is not None:
            return
        self._spawn(host)
        self._wait_listening(host)

    def reconfigure(self, host: str, extra: Sequence[str] = ()) -> None:
        """Restart `host`'s sshd with `extra` config lines (none: as it started)."""
        (self.dir / host / "sshd_config").write_text(
            self._sshd_config(host) + "".join(f"{line}\n" for line in extra)
        )
        self.stop_sshd(host)
        self.start_sshd(host)

    def set_env(self, host: str, extra: Mapping[str, str]) -> None:
        """Restart `host`'s sshd so that its sessions also see `extra` (none: as it started),
        as a login environment of that host alone would give them: a `Match all` block
        repeats the SetEnv line with them (in a Match block SetEnv replaces the first one's
        list, it does not add to it)."""
        first = next(ln for ln in self._sshd_config(host).splitlines() if ln.startswith("SetEnv "))
        words = " ".join(f"{k}={v}" for k, v in extra.items())
        self.reconfigure(host, ["Match all", f"  {first} {words}"] if extra else [])

    def host_certificate(self, host: str, ca: Path) -> Path:
        """Sign `host`'s key with the CA key `ca` (principals: its name and address)."""
        key = self.dir / host / "ssh_host_ed25519_key"
        principals = f"{host},{self.tb.host_ip(host)}"
        subprocess.run(
            ["ssh-keygen", "-q", "-s", str(ca), "-I", f"{host}-host", "-h", "-n", principals,
             str(key) + ".pub"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        return Path(str(key) + "-cert.pub")

    def new_key(self, name: str) -> Path:
        """A fresh ed25519 key pair in the testbed dir (the private key's path; .pub beside)."""
        path = self.dir / f"{name}-{time.monotonic_ns()}"
        _keygen(path, name)
        return path

    def stop(self) -> None:
        for host in list(self._procs):
            self.stop_sshd(host)
        for log in self._logs.values():
            log.close()

    # --------------------------------------------------------------- client
    def ssh_argv(self, host: str, command: str, *, options: Sequence[str] = ()) -> list[str]:
        return ["ssh", "-F", str(self.ssh_config), *options, host, command]

    def ssh(
        self,
        host: str,
        command: str,
        *,
        timeout: float = 60,
        check: bool = True,
        options: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` on `host` over real ssh, from the head namespace."""
        return self.tb.run(
            self.tb.head,
            self.ssh_argv(host, command, options=options),
            timeout=timeout,
            check=check,
            stdin=subprocess.DEVNULL,
        )
