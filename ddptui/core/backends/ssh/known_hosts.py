"""Provides OpenSSH's known_hosts rules for both SSH engines: which files, which names,
`@revoked` and `@cert-authority`, changed keys refused, new keys appended once under a lock.

Both engines hand the key a host offers to `KnownHosts.check` and act on its verdict, so a
host is trusted, refused or recorded the same way whichever engine reached it, and the same
way OpenSSH's `ssh` would (StrictHostKeyChecking yes, or accept-new with
--accept-new-host-keys).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import enum
import fcntl
import hashlib
import hmac
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PORT = 22
USER_FILES = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
GLOBAL_FILES = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
REVOKED, CERT_AUTHORITY = "@revoked", "@cert-authority"


def host_names(*hosts: str | None, port: int = DEFAULT_PORT) -> tuple[str, ...]:
    """The names a host is listed under: each of its names and addresses, as `[name]:port`
    when the port is not 22 (as OpenSSH writes and looks them up)."""
    names: dict[str, None] = {}
    for host in hosts:
        if host:
            names[host if port == DEFAULT_PORT else f"[{host}]:{port}"] = None
    return tuple(names)


def files_from_config(value: object, defaults: Sequence[str]) -> list[str]:
    """UserKnownHostsFile / GlobalKnownHostsFile as an ssh_config parser gives them (a
    string of space-separated files, or a list; `~` for home; `none` for none), else
    OpenSSH's defaults."""
    if isinstance(value, str) and value.strip():
        words = shlex.split(value)
    elif isinstance(value, list | tuple) and value:
        words = [str(v) for v in value]
    else:
        words = list(defaults)
    return [str(Path(w).expanduser()) for w in words if w.lower() != "none"]


def fingerprint(key_blob_b64: str) -> str:
    """`SHA256:...`, as `ssh-keygen -l` and ssh's messages print it."""
    try:
        blob = base64.b64decode(key_blob_b64)
    except (binascii.Error, ValueError):
        blob = key_blob_b64.encode()
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _glob(pattern: str) -> re.Pattern[str]:
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.IGNORECASE)


def _hashed_match(pattern: str, name: str) -> bool:
    """`|1|salt|hash`: HMAC-SHA1 of the name keyed by the salt (HashKnownHosts yes)."""
    try:
        _, _, salt, digest = pattern.split("|", 3)
        mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(mac, base64.b64decode(digest))
    except (ValueError, binascii.Error):
        return False


def patterns_match(patterns: str, names: Iterable[str]) -> bool:
    """OpenSSH's rule: some name matches a pattern, and no name matches a negated one."""
    matched = False
    for name in names:
        for pattern in patterns.split(","):
            negated = pattern.startswith("!")
            pattern = pattern[1:] if negated else pattern
            if pattern.startswith("|1|"):
                hit = not negated and _hashed_match(pattern, name)
            else:
                hit = bool(_glob(pattern).fullmatch(name))
            if hit and negated:
                return False
            matched = matched or hit
    return matched


@dataclass(frozen=True)
class KnownKey:
    """One usable line of a known_hosts file."""

    path: str
    line: int
    marker: str | None  # REVOKED, CERT_AUTHORITY or None
    patterns: str
    key_type: str
    key: str  # base64 blob

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def public_key(self) -> str:
        return f"{self.key_type} {self.key}"


def parse_line(path: str, number: int, raw: str) -> KnownKey | None:
    """A known_hosts line, or None for comments, blanks and lines OpenSSH would skip."""
    fields = raw.split()
    if not fields or fields[0].startswith("#"):
        return None
    marker = None
    if fields[0].startswith("@"):
        if fields[0] not in (REVOKED, CERT_AUTHORITY):
            return None
        marker, fields = fields[0], fields[1:]
    if len(fields) < 3:
        return None
    try:
        base64.b64decode(fields[2], validate=True)
    except (binascii.Error, ValueError):
        return None
    return KnownKey(path, number, marker, fields[0], fields[1], fields[2])


class Verdict(enum.Enum):
    TRUSTED = "trusted"
    UNKNOWN = "unknown"
    CHANGED = "changed"
    REVOKED = "revoked"


@dataclass(frozen=True)
class HostKeyCheck:
    verdict: Verdict
    evidence: tuple[KnownKey, ...] = ()  # the lines that decided it


def _literal_names(patterns: str) -> list[str] | None:
    """The names a line's patterns list, lower-cased, when every one is a plain name (no
    wildcard, negation or hash): such a line matches exactly those names."""
    names = patterns.split(",")
    if any(n[:1] == "!" or n.startswith("|1|") or "*" in n or "?" in n for n in names):
        return None
    return [n.lower() for n in names]


class KnownHosts:
    """Every known_hosts file OpenSSH would read for a host (user files, then global
    files), read once; unreadable files and malformed lines are skipped as ssh skips them.

    Lines listing plain names are indexed by name: with one line per host, looking a host up
    would otherwise test every line's patterns, for every host (quadratic at hundreds of
    hosts). Lines with wildcards, negations or hashed names are still tested one by one.
    """

    def __init__(self, user_files: Sequence[str], global_files: Sequence[str] = ()) -> None:
        self.user_files = list(user_files)
        self.global_files = list(global_files)
        read = [(path, *_read_stamped(path)) for path in self.files]
        signature = tuple((path, stamp) for path, stamp, _ in read)
        index = _index_cache.get(signature)
        if index is None:  # the same files, unchanged, are indexed once, not once a host
            index = _indexed([key for _, _, keys in read for key in keys])
            if len(_index_cache) >= 8:
                _index_cache.clear()
            _index_cache[signature] = index
        keys, self._by_name, self._patterned = index
        self.keys: list[KnownKey] = list(keys)

    @property
    def files(self) -> list[str]:
        return [*self.user_files, *self.global_files]

    def matching(self, names: Sequence[str], marker: str | None = None) -> list[KnownKey]:
        found = {i for name in names for i in self._by_name.get(name.lower(), ())}
        found.update(i for i in self._patterned if patterns_match(self.keys[i].patterns, names))
        return [self.keys[i] for i in sorted(found) if self.keys[i].marker == marker]

    def known_types(self, names: Sequence[str]) -> set[str]:
        """Key types already known for the host: the ones to ask it for (as ssh does)."""
        return {k.key_type for k in self.matching(names)}

    def check(self, names: Sequence[str], key_type: str, key: str) -> HostKeyCheck:
        revoked = [k for k in self.matching(names, REVOKED) if k.key == key]
        if revoked:
            return HostKeyCheck(Verdict.REVOKED, tuple(revoked))
        known = self.matching(names)
        same = [k for k in known if k.key_type == key_type and k.key == key]
        if same:
            return HostKeyCheck(Verdict.TRUSTED, tuple(same))
        if known:
            return HostKeyCheck(Verdict.CHANGED, tuple(known))
        return HostKeyCheck(Verdict.UNKNOWN)

    def is_revoked(self, names: Sequence[str], key: str) -> bool:
        return any(k.key == key for k in self.matching(names, REVOKED))

    def ca_keys(self, names: Sequence[str]) -> list[KnownKey]:
        """The certificate authorities trusted for the host (a revoked one is not)."""
        gone = {k.key for k in self.matching(names, REVOKED)}
        return [k for k in self.matching(names, CERT_AUTHORITY) if k.key not in gone]

    def record_file(self) -> str | None:
        """Where a new key goes: the first user file (as ssh's accept-new does)."""
        return self.user_files[0] if self.user_files else None

    def message(self, host: str, check: HostKeyCheck, key_type: str, key: str) -> str:
        """What to tell the operator, one line, in the spirit of ssh's own messages."""
        offered = f"{key_type} key {fingerprint(key)}"
        if check.verdict is Verdict.REVOKED:
            return (
                f"{host}: the host key it offers ({offered}) is marked @revoked in "
                f"{check.evidence[0].where}: refusing to connect"
            )
        if check.verdict is Verdict.CHANGED:
            where = ", ".join(k.where for k in check.evidence)
            return (
                f"{host}: REMOTE HOST IDENTIFICATION HAS CHANGED: it offers {offered}, "
                f"not the key recorded for it in {where}; someone could be eavesdropping "
                "(man-in-the-middle), or the host's key was replaced: check with its "
                "administrator. Refusing to connect"
            )
        target = self.record_file() or "~/.ssh/known_hosts"
        return (
            f"host key of {host} is not in {' or '.join(self.files) or target} "
            f"(it offers {offered}): verify it, then add it with "
            f"`ssh-keyscan {shlex.quote(host)} >> {target}` or rerun with --accept-new-host-keys"
        )

    def record(self, names: Sequence[str], key_type: str, key: str) -> str | None:
        """Append `names key_type key` to the first user file, once: under an exclusive lock,
        and only if no line of the file lists that key for those names yet. The file's other
        lines (comments too) stay as they are. Returns the file written, or None."""
        path = self.record_file()
        if path is None:
            return None
        folder = os.path.dirname(path)
        if folder and not os.path.isdir(folder):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "r+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                f.seek(0)
                text = f.read().decode(errors="replace")
                for number, raw in enumerate(text.splitlines(), start=1):
                    found = parse_line(path, number, raw)
                    if (
                        found is not None
                        and found.marker is None
                        and found.key == key
                        and patterns_match(found.patterns, names)
                    ):
                        return path
                prefix = "" if not text or text.endswith("\n") else "\n"
                line = f"{prefix}{','.join(names)} {key_type} {key}\n"
                f.write(line.encode())
                f.flush()
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return path


Stamp = tuple[int, int, int] | None  # a file's inode, size and mtime; None: unreadable
Index = tuple[list[KnownKey], dict[str, list[int]], list[int]]
_read_cache: dict[str, tuple[tuple[int, int, int], list[KnownKey]]] = {}
_index_cache: dict[tuple[tuple[str, Stamp], ...], Index] = {}


def _indexed(keys: list[KnownKey]) -> Index:
    """The keys, each plain name's lines, and the lines with patterns (see KnownHosts)."""
    by_name: dict[str, list[int]] = {}
    patterned: list[int] = []
    for index, key in enumerate(keys):
        literal = _literal_names(key.patterns)
        if literal is None:
            patterned.append(index)
        for name in literal or ():
            by_name.setdefault(name, []).append(index)
    return keys, by_name, patterned


def _read_stamped(path: str) -> tuple[Stamp, list[KnownKey]]:
    """The file's usable lines and its stamp; a file unchanged since it was last read (same
    inode, size and mtime) is not read again (every host's connection reads the same files)."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = _read_cache.get(path)
        if cached is not None and cached[0] == stamp:
            return stamp, cached[1]
        text = Path(path).read_bytes().decode(errors="replace")
        found = (parse_line(path, n, raw) for n, raw in enumerate(text.splitlines(), start=1))
        keys = [k for k in found if k is not None]
        _read_cache[path] = (stamp, keys)
        return stamp, keys
    return None, []
