"""Provides AsyncsshTransport: a node reached over asyncssh, reconnecting when the link drops."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncssh

from ddptui.core.backends.ssh.early_connect import EarlySockets
from ddptui.core.backends.transport import ChunkSink, CommandResult, Transport, TransportError
from ddptui.core.job.spec import SshSpec

KEEPALIVE_S = 2
KEEPALIVE_MAX = 3


def trust_hint(host: str, known_hosts: str | None) -> str:
    where = known_hosts or "~/.ssh/known_hosts"
    return (
        f"host key of {host} is not in {where}: verify it, then add it with "
        f"`ssh-keyscan {shlex.quote(host)} >> {where}` or rerun with --accept-new-host-keys"
    )


class AsyncsshTransport(Transport):
    """One SSH connection per host, honouring ~/.ssh/config (User, Port, IdentityFile,
    ProxyJump) and known_hosts; an unknown host key is refused unless the operator opted in,
    and a changed one is always refused."""

    def __init__(self, host: str, options: SshSpec) -> None:
        self.host = host
        self.options = options
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._early: EarlySockets | None = None

    def offer_early(self, early: EarlySockets) -> None:
        """Use the socket `early` opened to this host, if the config leads to the same place."""
        self._early = early

    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "connect_timeout": self.options.connect_timeout,
            "keepalive_interval": KEEPALIVE_S,
            "keepalive_count_max": KEEPALIVE_MAX,
        }
        if self.options.config_file:
            kwargs["config"] = [self.options.config_file]
        if self.options.known_hosts:
            kwargs["known_hosts"] = self.options.known_hosts
        if self.options.user:
            kwargs["username"] = self.options.user
        return kwargs

    @property
    def peer_address(self) -> str | None:
        """The address this host was reached at, which the other nodes can reach too."""
        if self._conn is None:
            return None
        peer = self._conn.get_extra_info("peername")
        return str(peer[0]) if peer else None

    async def connect(self) -> None:
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return
            self._conn = await self._open()

    async def _open(self) -> asyncssh.SSHClientConnection:
        kwargs = self._connect_kwargs()
        try:
            sock = await self._early_socket(kwargs)
            return await asyncssh.connect(self.host, sock=sock, **kwargs)
        except asyncssh.HostKeyNotVerifiable:
            if not self.options.accept_new_host_keys or self._key_was_changed(kwargs):
                raise TransportError(self._host_key_message(kwargs)) from None
            return await self._accept_new_key(kwargs)
        except asyncssh.PermissionDenied:
            raise TransportError(f"{self.host}: permission denied (no usable key)") from None
        except (TimeoutError, OSError, asyncssh.Error) as exc:
            raise TransportError(f"{self.host}: cannot connect: {_reason(exc)}") from None

    async def _early_socket(self, kwargs: dict[str, Any]) -> Any:
        """The early socket, only where asyncssh's own reading of the config agrees with it."""
        early, self._early = self._early, None
        if early is None or self.host not in early.hosts():
            return None
        options = self._options(kwargs)
        if options.tunnel or options.proxy_command or options.local_addr:
            await early.claim(self.host, "", -1)  # closes it
            return None
        return await early.claim(
            self.host, str(options.host), int(options.port), self.options.connect_timeout
        )

    def _options(self, kwargs: dict[str, Any]) -> asyncssh.SSHClientConnectionOptions:
        return asyncssh.SSHClientConnectionOptions(host=self.host, **_without(kwargs))

    def _key_was_changed(self, kwargs: dict[str, Any]) -> bool:
        """A host already listed with another key is a changed key: never accepted."""
        path = self._known_hosts_path(kwargs)
        if path is None or not Path(path).is_file():
            return False
        options = self._options(kwargs)
        known = asyncssh.read_known_hosts(path)
        host = getattr(options, "host", None) or self.host
        keys = known.match(host, "", getattr(options, "port", 22))[0]
        return bool(keys)

    def _known_hosts_path(self, kwargs: dict[str, Any]) -> str | None:
        if self.options.known_hosts:
            return self.options.known_hosts
        kh = getattr(self._options(kwargs), "known_hosts", None)
        if isinstance(kh, list | tuple) and kh:
            return str(Path(str(kh[0])).expanduser())
        return str(Path("~/.ssh/known_hosts").expanduser())

    def _host_key_message(self, kwargs: dict[str, Any]) -> str:
        return trust_hint(self.host, self._known_hosts_path(kwargs))

    async def _accept_new_key(self, kwargs: dict[str, Any]) -> asyncssh.SSHClientConnection:
        """Trust on first use, as `StrictHostKeyChecking accept-new` does: record, then connect."""
        conn = await asyncssh.connect(self.host, **{**kwargs, "known_hosts": None})
        key = conn.get_server_host_key()
        path = self._known_hosts_path(kwargs)
        if key is not None and path:
            peer = conn.get_extra_info("peername")
            names = ",".join(dict.fromkeys([self.host, str(peer[0])] if peer else [self.host]))
            _append_line(path, f"{names} {key.export_public_key().decode().strip()}")
        return conn

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(Exception):
                await self._conn.wait_closed()
            self._conn = None

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self._conn is None or self._conn.is_closed():
            await self.connect()
        assert self._conn is not None
        return self._conn

    async def run(
        self, argv: Sequence[str], stdin: bytes | None = None, timeout: float | None = None
    ) -> CommandResult:
        conn = await self._connection()
        try:
            result = await asyncio.wait_for(
                conn.run(shlex.join(argv), input=stdin, encoding=None, check=False), timeout
            )
        except (TimeoutError, OSError, asyncssh.Error) as exc:
            self._drop()
            raise TransportError(f"{self.host}: {_reason(exc)}") from None
        return CommandResult(result.exit_status, _text(result.stdout), _text(result.stderr))

    async def stream(
        self, argv: Sequence[str], on_stdout: ChunkSink, stdin: bytes | None = None
    ) -> CommandResult:
        conn = await self._connection()
        try:
            proc = await conn.create_process(shlex.join(argv), encoding=None)
        except (OSError, asyncssh.Error) as exc:
            self._drop()
            raise TransportError(f"{self.host}: {_reason(exc)}") from None
        try:
            if stdin is not None:
                proc.stdin.write(stdin)
            proc.stdin.write_eof()
            err_task = asyncio.ensure_future(proc.stderr.read())
            while chunk := await proc.stdout.read(1 << 16):
                on_stdout(chunk)
            completed = await proc.wait(check=False)
            err = await err_task
        except (OSError, asyncssh.Error) as exc:
            self._drop()
            raise TransportError(f"{self.host}: {_reason(exc)}") from None
        finally:
            proc.close()
        if completed.exit_status is None and completed.exit_signal is None:
            self._drop()
            raise TransportError(f"{self.host}: connection lost")
        return CommandResult(completed.exit_status, "", _text(err))

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.abort()
            self._conn = None


def _without(d: dict[str, Any]) -> dict[str, Any]:
    """Connection options minus those that only matter for the socket itself."""
    return {k: v for k, v in d.items() if k not in ("connect_timeout",)}


def _append_line(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def _text(data: object) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return str(data or "")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is sshd running there?)"
    if isinstance(exc, asyncssh.DisconnectError):
        return exc.reason or type(exc).__name__
    return str(exc) or type(exc).__name__
