"""Provides ParamikoTransport: the second SSH engine, paramiko run in threads."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import paramiko

from ddptui.core.backends.ssh.known_hosts import (
    DEFAULT_PORT,
    GLOBAL_FILES,
    USER_FILES,
    KnownHosts,
    Verdict,
    files_from_config,
    host_names,
)
from ddptui.core.backends.transport import (
    ChunkSink,
    CommandResult,
    Transport,
    TransportError,
    TransportTimeout,
)
from ddptui.core.job.spec import SshSpec

KEEPALIVE_S = 2
DEAD_AFTER_S = 8.0
# Before a stream's first byte the login shell may still be starting (a profile's conda
# init, module loads, a slow home directory): silence then is no lost link. As long as a
# node's start may take (backends.base.START_TIMEOUT_S).
FIRST_BYTE_S = 60.0


class ParamikoTransport(Transport):
    """Same contract as AsyncsshTransport, for sites where paramiko serves better.

    paramiko reads ~/.ssh/config for HostName, User, Port, IdentityFile, ProxyCommand and
    UserKnownHostsFile. ProxyJump is done here: one hop (`[user@]host[:port]`, that host's own
    config entry applying, its own ProxyJump too), a channel through it as the socket."""

    def __init__(self, host: str, options: SshSpec) -> None:
        self.host = host
        self.options = options
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()
        self.peer_address: str | None = None
        self._jump: ParamikoTransport | None = None
        self.port: int | None = None  # a ProxyJump hop's `host:port`, over the config's

    def _config(self) -> dict[str, Any]:
        path = Path(self.options.config_file or "~/.ssh/config").expanduser()
        if not path.is_file():
            return {"hostname": self.host}
        return dict(paramiko.SSHConfig.from_path(str(path)).lookup(self.host))

    def _known_hosts(self, cfg: dict[str, Any]) -> KnownHosts:
        """The files OpenSSH would read: --known-hosts, or the config's UserKnownHostsFile
        (default ~/.ssh/known_hosts{,2}), and its GlobalKnownHostsFile (/etc/ssh/...)."""
        user = (
            [self.options.known_hosts]
            if self.options.known_hosts
            else files_from_config(cfg.get("userknownhostsfile"), USER_FILES)
        )
        system = files_from_config(cfg.get("globalknownhostsfile"), GLOBAL_FILES)
        return KnownHosts(user, system)

    def _open(self) -> paramiko.SSHClient:
        cfg = self._config()
        hostname = cfg.get("hostname", self.host)
        try:
            port = self.port or int(cfg.get("port", DEFAULT_PORT))
        except ValueError:
            raise TransportError(
                f"{self.host}: bad ssh config: Port {cfg.get('port')!r} is not a number"
            ) from None
        policy = _HostKeyPolicy(self, self._known_hosts(cfg), hostname, port)
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(policy)  # every key goes to known_hosts.py
        sock: Any = None
        if cfg.get("proxycommand"):
            sock = paramiko.ProxyCommand(cfg["proxycommand"])
        elif cfg.get("proxyjump", "none").lower() != "none":
            sock = self._through(cfg["proxyjump"], hostname, port)
        try:
            client.connect(
                hostname,
                port=port,
                username=self.options.user or cfg.get("user"),
                key_filename=[str(Path(k).expanduser()) for k in cfg.get("identityfile", [])]
                or None,
                timeout=self.options.connect_timeout,
                banner_timeout=self.options.connect_timeout,
                auth_timeout=self.options.connect_timeout,
                sock=sock,
                disabled_algorithms=policy.disabled_algorithms(),
            )
        except _Refused as exc:
            raise TransportError(str(exc)) from None
        except paramiko.SSHException as exc:
            raise TransportError(f"{self.host}: {_ssh_reason(exc)}") from None
        except ConnectionRefusedError:
            raise TransportError(
                f"{self.host}: cannot connect: connection refused (is sshd running there?)"
            ) from None
        except (TimeoutError, OSError) as exc:
            raise TransportError(f"{self.host}: cannot connect: {exc}") from None
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(KEEPALIVE_S)
        # Through a proxy the socket's peer is not the host: its address is the HostName.
        self.peer_address = str(transport.getpeername()[0]) if sock is None else hostname
        return client

    def _through(self, jump: str, hostname: str, port: int) -> paramiko.Channel:
        """A direct-tcpip channel to (hostname, port) from the jump host (ProxyJump)."""
        if "," in jump:
            raise TransportError(
                f"{self.host}: ProxyJump chains ({jump}) need --ssh-engine asyncssh"
            )
        user, _, where = jump.rpartition("@")
        name, _, jport = where.partition(":")
        options = self.options.model_copy(update={"user": user or None})
        self._jump = ParamikoTransport(name, options)
        self._jump.port = int(jport) if jport else None
        client = self._jump._ensure()
        transport = client.get_transport()
        assert transport is not None
        try:
            return transport.open_channel("direct-tcpip", (hostname, port), ("", 0))
        except (paramiko.SSHException, OSError) as exc:
            raise TransportError(f"{self.host}: through {jump}: {exc}") from None

    def _ensure(self) -> paramiko.SSHClient:
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                self._client = self._open()
            return self._client

    def _drop(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            if self._jump is not None:
                self._jump._drop()
                self._jump = None

    async def connect(self) -> None:
        await asyncio.to_thread(self._ensure)

    async def close(self) -> None:
        await asyncio.to_thread(self._drop)

    def _exec(
        self,
        argv: Sequence[str],
        stdin: bytes | None,
        on_stdout: ChunkSink | None,
        stop: threading.Event,
    ) -> CommandResult:
        channel = self._ensure().get_transport().open_session()
        channel.settimeout(0.5)
        try:
            channel.exec_command(shlex.join(argv))
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            out, err = bytearray(), bytearray()
            last_data = time.monotonic()
            silence = FIRST_BYTE_S
            while not stop.is_set():
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(1 << 16)
                    last_data = time.monotonic()
                try:
                    chunk = channel.recv(1 << 16)
                except TimeoutError:
                    # paramiko's keepalives expect no reply, so a cut link looks alive for
                    # minutes; the node helper's tail sends a heartbeat every second instead.
                    if on_stdout is not None and time.monotonic() - last_data > silence:
                        # A fresh connection next time: the stalled one may only come back
                        # when TCP retries, seconds after the link does.
                        self._drop()
                        raise TransportError(f"{self.host}: connection lost") from None
                    continue
                last_data, silence = time.monotonic(), DEAD_AFTER_S
                if not chunk:
                    break
                if on_stdout is None:
                    out += chunk
                else:
                    on_stdout(chunk)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(1 << 16)
            if stop.is_set():
                return CommandResult(None, "", "")
            code = channel.recv_exit_status()
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(1 << 16)
            if code == -1:
                self._drop()
                raise TransportError(f"{self.host}: connection lost")
            return CommandResult(code, out.decode(errors="replace"), err.decode(errors="replace"))
        except (OSError, paramiko.SSHException) as exc:
            self._drop()
            raise TransportError(f"{self.host}: {exc}") from None
        finally:
            with contextlib.suppress(Exception):
                channel.close()

    async def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        stop = threading.Event()
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self._exec, argv, stdin, None, stop), timeout
            )
        except TimeoutError:
            stop.set()
            raise TransportTimeout(f"{self.host}: timed out after {timeout} s") from None

    async def stream(
        self, argv: Sequence[str], on_stdout: ChunkSink, stdin: bytes | None = None
    ) -> CommandResult:
        loop = asyncio.get_running_loop()
        stop = threading.Event()

        def deliver(chunk: bytes) -> None:
            loop.call_soon_threadsafe(on_stdout, chunk)

        try:
            result = await asyncio.to_thread(self._exec, argv, stdin, deliver, stop)
        finally:
            stop.set()
        await asyncio.sleep(0)  # let the last call_soon_threadsafe deliveries run first
        return result


class _Refused(paramiko.SSHException):
    """known_hosts.py refused the host's key; the message is for the operator."""


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko's side of known_hosts.py: the client holds no keys of its own, so every key
    a host offers comes here and gets known_hosts.py's verdict (paramiko's own known_hosts
    reader fails on @cert-authority and @revoked lines and rewrites the whole file)."""

    def __init__(
        self, transport: ParamikoTransport, known: KnownHosts, hostname: str, port: int
    ) -> None:
        self.transport = transport
        self.known = known
        self.hostname = hostname
        self.port = port

    def disabled_algorithms(self) -> dict[str, list[str]] | None:
        """Ask the host for a key type already known for it, as ssh does: another type
        would look like a changed key. (paramiko cannot check host certificates: a host
        known only through @cert-authority is an unknown host to it.)"""
        names = host_names(self.transport.host, self.hostname, port=self.port)
        known = self.known.known_types(names)
        if not known:
            return None
        offered = paramiko.Transport._preferred_keys
        off = [alg for alg in offered if _key_type(alg) not in known]
        return {"keys": off} if len(off) < len(offered) else None

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: Any) -> None:
        address = None
        with contextlib.suppress(Exception):
            address = str(client.get_transport().getpeername()[0])
        names = host_names(self.transport.host, self.hostname, address, port=self.port)
        key_type, blob = key.get_name(), key.get_base64()
        check = self.known.check(names, key_type, blob)
        if check.verdict is Verdict.TRUSTED:
            return
        if check.verdict is Verdict.UNKNOWN and self.transport.options.accept_new_host_keys:
            self.known.record(names, key_type, blob)
            return
        message = self.known.message(self.transport.host, check, key_type, blob)
        if check.verdict is Verdict.UNKNOWN and self.known.ca_keys(names):
            where = self.known.ca_keys(names)[0].where
            message = (
                f"{self.transport.host}: known through @cert-authority ({where}), but paramiko "
                "cannot check host certificates: use --ssh-engine asyncssh"
            )
        raise _Refused(message)


def _key_type(algorithm: str) -> str:
    """The key type of a host key algorithm (rsa-sha2-512 signs with an ssh-rsa key)."""
    return "ssh-rsa" if algorithm.startswith("rsa-sha2-") else algorithm


BANNER_ERROR = "Error reading SSH protocol banner"


def _ssh_reason(exc: Exception) -> str:
    """paramiko's words; a host that never sent its banner (sshd hung, the connection reset)
    reads as the connection failure it is (paramiko glues the cause on without a space)."""
    text = str(exc)
    if text.startswith(BANNER_ERROR):
        cause = text[len(BANNER_ERROR) :].strip() or "timed out"
        return f"cannot connect: no SSH protocol banner ({cause})"
    return text
