"""Provides AsyncsshTransport: a node reached over asyncssh, reconnecting when the link drops."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

import asyncssh
from asyncssh.public_key import get_default_public_key_algs

from ddptui.core.backends.ssh.config_slice import config_for
from ddptui.core.backends.ssh.early_connect import EarlySockets
from ddptui.core.backends.ssh.known_hosts import (
    DEFAULT_PORT,
    GLOBAL_FILES,
    REVOKED,
    USER_FILES,
    KnownHosts,
    KnownKey,
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
KEEPALIVE_MAX = 3
_PLAIN_KEY_ALGS = [alg.decode() for alg in get_default_public_key_algs()]


class AsyncsshTransport(Transport):
    """One SSH connection per host, honouring ~/.ssh/config (User, Port, IdentityFile,
    ProxyJump) and known_hosts as OpenSSH does (known_hosts.py decides); an unknown host key
    is refused unless the operator opted in, and a changed or revoked one is always refused."""

    def __init__(self, host: str, options: SshSpec) -> None:
        self.host = host
        self.options = options
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._early: EarlySockets | None = None
        self._hostname: str | None = None

    def offer_early(self, early: EarlySockets) -> None:
        """Use the socket `early` opened to this host, if the config leads to the same place."""
        self._early = early

    def _connect_kwargs(self, whole: bool = False) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "connect_timeout": self.options.connect_timeout,
            "keepalive_interval": KEEPALIVE_S,
            "keepalive_count_max": KEEPALIVE_MAX,
        }
        config = self.options.config_file or os.path.expanduser("~/.ssh/config")
        if self.options.config_file or os.access(config, os.R_OK):
            # this host's part of the file: asyncssh parses it for every connection
            kwargs["config"] = [config if whole else config_for(config, self.host)]
        if self.options.user:
            kwargs["username"] = self.options.user
        return kwargs

    @property
    def peer_address(self) -> str | None:
        """The address this host was reached at, which the other nodes can reach too."""
        if self._conn is None:
            return None
        peer = self._conn.get_extra_info("peername")
        if peer and peer[0]:
            return str(peer[0])
        # Through ProxyJump/ProxyCommand there is no socket to this host: its HostName is
        # where the jump host reached it.
        if self._hostname is None:
            self._hostname = str(self._options(self._connect_kwargs()).host or "") or None
        return self._hostname

    async def connect(self) -> None:
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return
            self._conn = await self._open()

    async def _open(self) -> asyncssh.SSHClientConnection:
        kwargs = self._connect_kwargs()
        try:
            options = self._options(kwargs)
        except asyncssh.ConfigParseError:
            try:  # the whole file, for an error that names its own lines
                options = self._options(self._connect_kwargs(whole=True))
            except asyncssh.ConfigParseError as exc:
                raise TransportError(f"{self.host}: bad ssh config: {exc}") from None
        known = self._known_hosts(options)
        check = _HostKeyCheck(self.host, known, self.options)
        names = host_names(self.host, str(options.host), port=int(options.port))
        if not known.matching(names) and not known.ca_keys(names):
            # Nothing known of the host: ask for its plain key, not a certificate no CA
            # here could vouch for (ssh does the same), so trust on first use records it.
            kwargs["server_host_key_algs"] = _PLAIN_KEY_ALGS
        try:
            sock = await self._early_socket(options)
            return await asyncssh.connect(
                self.host,
                sock=sock,
                known_hosts=check.lookup,
                client_factory=check.client,
                **kwargs,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise TransportError(check.refusal(str(exc))) from None
        except asyncssh.PermissionDenied:
            raise TransportError(f"{self.host}: permission denied (no usable key)") from None
        except (TimeoutError, OSError, asyncssh.Error) as exc:
            raise TransportError(f"{self.host}: cannot connect: {_reason(exc)}") from None

    async def _early_socket(self, options: asyncssh.SSHClientConnectionOptions) -> Any:
        """The early socket, only where asyncssh's own reading of the config agrees with it."""
        early, self._early = self._early, None
        if early is None or self.host not in early.hosts():
            return None
        if options.tunnel or options.proxy_command or options.local_addr:
            await early.claim(self.host, "", -1)  # closes it
            return None
        return await early.claim(
            self.host, str(options.host), int(options.port), self.options.connect_timeout
        )

    def _options(self, kwargs: dict[str, Any]) -> asyncssh.SSHClientConnectionOptions:
        return asyncssh.SSHClientConnectionOptions(host=self.host, **_without(kwargs))

    def _known_hosts(self, options: asyncssh.SSHClientConnectionOptions) -> KnownHosts:
        """The files OpenSSH would read: --known-hosts, or the config's UserKnownHostsFile
        (default ~/.ssh/known_hosts{,2}), and its GlobalKnownHostsFile (/etc/ssh/...)."""
        config = options.config
        user = (
            [self.options.known_hosts]
            if self.options.known_hosts
            else files_from_config(config.get("UserKnownHostsFile"), USER_FILES)
        )
        system = files_from_config(config.get("GlobalKnownHostsFile"), GLOBAL_FILES)
        return KnownHosts(user, system)

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
        except TimeoutError:
            # The command was slow, not the link (a dead link is the keepalives' to find): the
            # connection stays, and the node's log stream on it with it. A login shell that
            # takes 12 s made each of the clock's `date` readings time out, and dropping the
            # connection then cut the log stream three times over.
            raise TransportTimeout(f"{self.host}: timed out after {timeout} s") from None
        except (OSError, asyncssh.Error) as exc:
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


class _HostKeyCheck:
    """asyncssh's side of known_hosts.py: the keys and CAs it may trust for the host (so it
    asks the host for those key types, and checks certificates itself), and the verdict on
    any other key, which decides between trust on first use and refusal."""

    def __init__(self, host: str, known: KnownHosts, options: SshSpec) -> None:
        self.host = host
        self.known = known
        self.accept_new = options.accept_new_host_keys
        self.names: tuple[str, ...] = (host,)
        self.message = ""

    def lookup(self, host: str, addr: str, port: int | None) -> tuple[list[Any], ...]:
        self.names = host_names(self.host, host, addr, port=port or DEFAULT_PORT)
        revoked = self.known.matching(self.names, REVOKED)
        gone = {k.key for k in revoked}
        trusted = [k for k in self.known.matching(self.names) if k.key not in gone]
        return (
            _keys(trusted),
            _keys(self.known.ca_keys(self.names)),
            _keys(revoked),
        )

    def client(self) -> asyncssh.SSHClient:
        check = self

        class Client(asyncssh.SSHClient):
            def validate_host_public_key(
                self, host: str, addr: str, port: int, key: asyncssh.SSHKey
            ) -> bool:
                return check.validate(host, addr, port, key)

        return Client()

    def validate(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        names = host_names(self.host, host, addr, port=port)
        key_type, blob = key.export_public_key("openssh").decode().split()[:2]
        verdict = self.known.check(names, key_type, blob)
        if verdict.verdict is Verdict.TRUSTED:
            return True
        if verdict.verdict is Verdict.UNKNOWN and self.accept_new:
            self.known.record(names, key_type, blob)
            return True
        self.message = self.known.message(self.host, verdict, key_type, blob)
        return False

    def refusal(self, reason: str) -> str:
        if self.message:
            return self.message
        if "revoked" in reason.lower():
            lines = ", ".join(k.where for k in self.known.matching(self.names, REVOKED))
            return (
                f"{self.host}: the host key it offers is marked @revoked in {lines}: "
                "refusing to connect"
            )
        return f"{self.host}: host key not accepted: {reason}"


def _keys(known: Iterable[KnownKey]) -> list[asyncssh.SSHKey]:
    keys = []
    for k in known:
        with contextlib.suppress(asyncssh.KeyImportError):
            keys.append(asyncssh.import_public_key(k.public_key))
    return keys


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
