"""Provides the files a testbed writes for each namespace under /etc/netns (`ip netns exec`
binds them over /etc): its hosts file and, for plain root logins, a passwd."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def hosts_text(ips: Mapping[str, str], alias: Mapping[str, str]) -> str:
    """Every namespace's name (and an alias, if it has one) at its address, v4 and v4-mapped."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    for name, ip in ips.items():
        names = f"{name} {alias[name]}" if name in alias else name
        lines += [f"{ip} {names}", f"::ffff:{ip} {names}"]
    return "\n".join(lines) + "\n"


def plain_passwd(home: Path) -> str:
    """The machine's passwd with root's home moved to `home` (no .bashrc of the machine's)."""
    home.mkdir(exist_ok=True)
    out = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == "root" and len(fields) == 7:
            fields[5] = str(home)
        out.append(":".join(fields))
    return "\n".join(out) + "\n"
