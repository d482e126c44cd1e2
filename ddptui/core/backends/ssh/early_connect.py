"""Provides EarlySockets: TCP connections to the first hosts, opened before the SSH engine loads.

Why: importing asyncssh (or paramiko) and its cryptography takes 0.1-0.2 s, longer than a TCP
handshake and sshd's start of a session on most networks. Opening the sockets first lets both
happen at once. Only the stdlib is used here, so nothing heavy is imported before the sockets
are on their way.

A socket is only a guess at where the engine will connect: the engine resolves the host with
its own ssh_config reading, and `claim` hands the socket over only when that gives the same
HostName and Port and no proxy or tunnel. Anything this module cannot read for sure (Match,
Include, ProxyJump, ProxyCommand, %-tokens other than %h and %%, ...) means no early socket for
any host, and the engine connects as it always does.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import socket
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

# asyncio is imported where it is used: the CLI opens the sockets before anything else loads
# (ddptui/cli/early.py), and this module is all it imports for that.

# Keywords that change where or how the connection goes in ways this reader does not follow.
_UNSUPPORTED = frozenset(
    {
        "match",
        "include",
        "proxyjump",
        "proxycommand",
        "canonicalizehostname",
        "bindaddress",
        "bindinterface",
        "addressfamily",
        "hostkeyalias",
    }
)


def read_targets(text: str, hosts: Iterable[str]) -> dict[str, tuple[str, int]] | None:
    """(HostName, Port) of each host as ssh_config `text` gives them; None if unsure.

    ssh semantics: for each keyword the first value obtained wins; a Host line matches when
    one of its patterns matches and none of its negated (`!`) patterns does.
    """
    blocks: list[tuple[list[str], dict[str, str]]] = [(["*"], {})]
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, rest = line.replace("=", " ", 1).partition(" ")
        key, value = key.lower(), rest.strip().strip('"')
        if key in _UNSUPPORTED:
            return None
        if key == "host":
            blocks.append((value.split(), {}))
        elif key in ("hostname", "port"):
            blocks[-1][1].setdefault(key, value)
    out: dict[str, tuple[str, int]] = {}
    for host in hosts:
        found: dict[str, str] = {}
        for patterns, values in blocks:
            if _host_matches(host, patterns):
                for key, value in values.items():
                    found.setdefault(key, value)
        name = _expand(found.get("hostname", host), host)
        if name is None:
            return None
        try:
            port = int(found.get("port", "22"))
        except ValueError:
            return None
        out[host] = (name, port)
    return out


def _host_matches(host: str, patterns: Sequence[str]) -> bool:
    positive = False
    for pattern in patterns:
        if pattern.startswith("!"):
            if fnmatch.fnmatchcase(host, pattern[1:]):
                return False
        elif fnmatch.fnmatchcase(host, pattern):
            positive = True
    return positive


def _expand(value: str, host: str) -> str | None:
    out, i = [], 0
    while i < len(value):
        if value[i] == "%":
            token = value[i + 1 : i + 2]
            if token == "h":
                out.append(host)
            elif token == "%":
                out.append("%")
            else:
                return None
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _numeric(name: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, name)
        except OSError:
            continue
        return True
    return False


class EarlySockets:
    """Non-blocking connects to some hosts, each claimable once by that host's transport."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[socket.socket, str, int]] = {}

    @classmethod
    def open(cls, hosts: Sequence[str], config_file: str | None) -> EarlySockets:
        """Start connecting to `hosts` whose HostName is an address (no lookup blocks here).

        Names would need a resolver call on this thread, which may block on DNS: those hosts
        are left to the engine.
        """
        early = cls()
        path = Path(config_file or "~/.ssh/config").expanduser()
        try:
            text = path.read_text() if path.is_file() else ""
        except OSError:
            return early
        targets = read_targets(text, hosts)
        for host, (name, port) in (targets or {}).items():
            if _numeric(name):
                early._start(host, name, port)
        return early

    def _start(self, host: str, address: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex((address, port))
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            return
        self._pending[host] = (sock, address, port)

    def hosts(self) -> list[str]:
        return list(self._pending)

    async def claim(
        self, host: str, hostname: str, port: int, timeout: float | None = None
    ) -> socket.socket | None:
        """The connected socket for `host`, if the engine resolved it to the same place.

        A mismatch, or a connect that failed, gives None (and closes the socket): the engine
        then connects itself and reports any error in its own words. A connect still pending
        after `timeout` raises TimeoutError, as the engine's own connect would.
        """
        entry = self._pending.pop(host, None)
        if entry is None:
            return None
        sock, address, expected_port = entry
        if port != expected_port or hostname != address:
            sock.close()
            return None
        import asyncio

        try:
            await asyncio.wait_for(_writable(sock), timeout)
        except BaseException:  # timed out or cancelled: the socket is no one's
            sock.close()
            raise
        try:
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError:
            code = -1
        if code != 0:
            sock.close()
            return None
        return sock

    def close(self) -> None:
        """Close every socket no transport claimed."""
        for sock, _, _ in self._pending.values():
            with contextlib.suppress(OSError):
                sock.close()
        self._pending.clear()


async def _writable(sock: socket.socket) -> None:
    """Wait until a non-blocking connect has finished (successfully or not)."""
    import asyncio

    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_writer(fd, ready)
    try:
        await done
    finally:
        loop.remove_writer(fd)


_preopened: EarlySockets | None = None


def preopen(hosts: Sequence[str], config_file: str | None) -> None:
    """Open the sockets now, from the command line, for the SSH backend to take later."""
    global _preopened
    discard_preopened()
    _preopened = EarlySockets.open(hosts, config_file)


def take_preopened() -> EarlySockets | None:
    """The sockets `preopen` started, once (None if it did not run)."""
    global _preopened
    early, _preopened = _preopened, None
    return early


def discard_preopened() -> None:
    """Close sockets that no backend took (the job turned out not to use SSH)."""
    early = take_preopened()
    if early is not None:
        early.close()


def environment_disables() -> bool:
    """DDPTUI_EARLY_CONNECT=0 turns early sockets off (to compare, or to rule them out)."""
    return os.environ.get("DDPTUI_EARLY_CONNECT", "1") == "0"
