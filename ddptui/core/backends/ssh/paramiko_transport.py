"""Provides ParamikoTransport: the second SSH engine, paramiko run in threads."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import paramiko

from ddptui.core.backends.ssh.asyncssh_transport import trust_hint
from ddptui.core.backends.transport import ChunkSink, CommandResult, Transport, TransportError
from ddptui.core.job.spec import SshSpec

KEEPALIVE_S = 2
DEAD_AFTER_S = 8.0


class ParamikoTransport(Transport):
    """Same contract as AsyncsshTransport, for sites where paramiko serves better.

    paramiko reads ~/.ssh/config for HostName, User, Port, IdentityFile, ProxyCommand and
    UserKnownHostsFile; it has no ProxyJump (use ProxyCommand `ssh -W %h:%p jump`)."""

    def __init__(self, host: str, options: SshSpec) -> None:
        self.host = host
        self.options = options
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()
        self.peer_address: str | None = None

    def _config(self) -> dict[str, Any]:
        path = Path(self.options.config_file or "~/.ssh/config").expanduser()
        if not path.is_file():
            return {"hostname": self.host}
        return dict(paramiko.SSHConfig.from_path(str(path)).lookup(self.host))

    def _known_hosts(self, cfg: dict[str, Any]) -> str:
        if self.options.known_hosts:
            return self.options.known_hosts
        files = cfg.get("userknownhostsfile")
        first = files.split()[0] if isinstance(files, str) else None
        return str(Path(first or "~/.ssh/known_hosts").expanduser())

    def _open(self) -> paramiko.SSHClient:
        cfg = self._config()
        known_hosts = self._known_hosts(cfg)
        client = paramiko.SSHClient()
        if os.path.isfile(known_hosts):
            client.load_host_keys(known_hosts)
        if self.options.accept_new_host_keys:
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        else:
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        sock = paramiko.ProxyCommand(cfg["proxycommand"]) if cfg.get("proxycommand") else None
        try:
            client.connect(
                cfg.get("hostname", self.host),
                port=int(cfg.get("port", 22)),
                username=self.options.user or cfg.get("user"),
                key_filename=[str(Path(k).expanduser()) for k in cfg.get("identityfile", [])]
                or None,
                timeout=self.options.connect_timeout,
                banner_timeout=self.options.connect_timeout,
                auth_timeout=self.options.connect_timeout,
                sock=sock,
            )
        except paramiko.BadHostKeyException:
            raise TransportError(
                f"{self.host}: HOST KEY CHANGED — refusing to connect (check {known_hosts})"
            ) from None
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise TransportError(trust_hint(self.host, known_hosts)) from None
            raise TransportError(f"{self.host}: {exc}") from None
        except ConnectionRefusedError:
            raise TransportError(
                f"{self.host}: cannot connect: connection refused (is sshd running there?)"
            ) from None
        except (TimeoutError, OSError) as exc:
            raise TransportError(f"{self.host}: cannot connect: {exc}") from None
        if self.options.accept_new_host_keys:
            client.save_host_keys(known_hosts)
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(KEEPALIVE_S)
        self.peer_address = str(transport.getpeername()[0])
        return client

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
            while not stop.is_set():
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(1 << 16)
                    last_data = time.monotonic()
                try:
                    chunk = channel.recv(1 << 16)
                except TimeoutError:
                    # paramiko's keepalives expect no reply, so a cut link looks alive for
                    # minutes; the node helper's tail sends a heartbeat every second instead.
                    if on_stdout is not None and time.monotonic() - last_data > DEAD_AFTER_S:
                        # A fresh connection next time: the stalled one may only come back
                        # when TCP retries, seconds after the link does.
                        self._drop()
                        raise TransportError(f"{self.host}: connection lost") from None
                    continue
                last_data = time.monotonic()
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
            raise TransportError(f"{self.host}: timed out after {timeout} s") from None

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
