"""Provides host lists: comma lists, Slurm hostlist expressions (node[01-04]) and hostfiles."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import hostlist

from ddptui.core.job.spec import SpecError

_SLOTS = re.compile(r"^slots=(\d+)$")


@dataclass(frozen=True)
class HostEntry:
    name: str
    slots: int | None = None


def expand_hosts(expression: str) -> list[str]:
    """Expand `a,b`, `node[1-3]` or `gpu[01-02,05]` into names; a malformed one is a SpecError."""
    expression = expression.strip()
    if not expression:
        raise SpecError("empty host list")
    if any(c.isspace() or not c.isprintable() for c in expression):
        raise SpecError(
            f"bad host list {expression!r}: a space or control character in it "
            "(separate hosts with commas: a,b or node[1-4])"
        )
    try:
        names: list[str] = hostlist.expand_hostlist(expression, allow_duplicates=True)
    except (hostlist.BadHostlist, RecursionError) as exc:
        # python-hostlist recurses per bracket: a pathological expression exhausts the stack
        why = exc if isinstance(exc, hostlist.BadHostlist) else "too deeply nested"
        raise SpecError(f"bad host list {expression!r}: {why}") from None
    if not names:
        raise SpecError(
            f"bad host list {expression!r}: no host names in it (give a,b or node[1-4])"
        )
    if any(not n.strip() for n in names):
        raise SpecError(f"bad host list {expression!r}: empty host name")
    if len(set(names)) != len(names):
        raise SpecError(f"bad host list {expression!r}: a host appears twice")
    return names


def read_hostfile(path: str | Path) -> list[HostEntry]:
    """Read one host per line, `#` comments, DeepSpeed-style `host slots=N`."""
    p = Path(path)
    try:
        text = p.read_bytes().decode()
    except OSError as exc:
        raise SpecError(f"cannot read hostfile {p}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"hostfile {p} is not UTF-8 text (byte {exc.start}): save it as UTF-8"
        ) from None
    entries: list[HostEntry] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, *rest = line.split()
        slots = None
        for token in rest:
            match = _SLOTS.match(token)
            if not match:
                raise SpecError(f"{p}:{number}: unexpected {token!r} (expected slots=N)")
            slots = int(match.group(1))
        entries.extend(HostEntry(n, slots) for n in expand_hosts(name))
    if not entries:
        raise SpecError(f"hostfile {p} lists no hosts")
    return entries


def host_range(names: Sequence[str]) -> str:
    """Host names as one short hostlist expression (`local[0-1]`, `node[001-040]`), for a
    column a terminal must fit; `expand_hosts` gives the names back."""
    if not names:
        return ""
    try:
        short: str = hostlist.collect_hostlist(list(names))
    except (hostlist.BadHostlist, RecursionError, ValueError):
        return ",".join(names)
    return short
