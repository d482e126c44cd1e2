"""Provides the testbed's bulk calls to `ip` and the room it needs in the kernel's ARP table.

Why: a fleet testbed has hundreds of namespaces; one `ip` process per command (five per host)
made building one take minutes, and past ~250 hosts the kernel's one ARP table for all
namespaces fills up.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from contextlib import suppress
from pathlib import Path

NEIGH = Path("/proc/sys/net/ipv4/neigh/default")


def ip_batch(ns: str | None, commands: Sequence[str], timeout: float = 120) -> str | None:
    """Run `ip` commands in one process (inside namespace `ns` when given); the error, if any."""
    where = ["-n", ns] if ns else []
    cp = subprocess.run(
        ["ip", *where, "-batch", "-"],
        input="\n".join(commands) + "\n",
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if cp.returncode != 0:
        return f"ip {' '.join(where)} -batch failed: {cp.stderr.strip()[-800:]}"
    return None


def fit_neighbour_table(namespaces: int) -> None:
    """Make room in the kernel's ARP table for a testbed of this size.

    Why: the table is one for all namespaces, and its hard limit (gc_thresh3, 1,024 by
    default) is less than a 512-host testbed needs (the head learns every host, every host
    the head): past it, connects fail with "No route to host" and the kernel logs "neighbor
    table overflow". The limits are only ever raised here, never lowered.
    """
    need = 4 * namespaces + 1024
    for name, value in (("gc_thresh1", need // 4), ("gc_thresh2", need // 2), ("gc_thresh3", need)):
        path = NEIGH / name
        with suppress(OSError, ValueError):
            if int(path.read_text()) < value:
                path.write_text(f"{value}\n")


def mac_of(address: str) -> str:
    """A namespace's interface address, derived from its IPv4 address (locally administered,
    unique per address): known before the namespace answers ARP, see `neighbours`."""
    return "02:dd:" + ":".join(f"{int(b):02x}" for b in address.split("."))


def neighbours(peers: Iterable[str], dev: str) -> list[str]:
    """`ip neigh` commands that make each peer's (IP -> MAC) entry permanent on `dev`.

    Why: a 512-host connect burst floods one bridge with 512 ARP broadcasts, each copied to
    every port; under load some copies are dropped, and a host whose three ARP requests went
    unanswered fails with "No route to host" (EHOSTUNREACH) though nothing is wrong with it.
    Permanent entries between the head and the hosts take ARP out of what is measured.
    """
    return [f"neigh replace {ip} lladdr {mac_of(ip)} dev {dev} nud permanent" for ip in peers]
