"""Provides what the console asks of a node's network before a job: which interface holds
which address, and whether the rendezvous port can be bound (the job helper's `probe` and
`port`, and its start's checks).

Sent ahead of job_helper.py, and also a program of its own (`probe_source()`: this file and a
last line that runs `probe`), small because every node of a Slurm job compiles it in the
probe step while the launch waits. Standard library only.
"""

from __future__ import annotations

import json
import os
import shutil

TYPE_CHECKING = False  # typing is not imported on the node: it is its largest import there
if TYPE_CHECKING:
    from typing import Any


def _ipv4_of(ifname: str) -> str | None:
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))
        except OSError:
            return None
        return socket.inet_ntoa(packed[20:24])


def _ifname_holding(address: str) -> str | None:
    """The interface that holds `address` here, if one does."""
    import socket

    for _, name in socket.if_nameindex():
        if _ipv4_of(name) == address:
            return name
    return None


def probe(addr: str = "", number: str = "") -> int:
    """What the console needs to know of a node: its hostname and which interface holds
    which IPv4 address (so GLOO/NCCL_SOCKET_IFNAME can follow the address we reached);
    given an address and port, also whether the rendezvous port is free there (one round
    trip for the first node instead of two)."""
    import platform
    import socket

    ifaces = {}
    for _, name in socket.if_nameindex():
        address = _ipv4_of(name)
        if address:
            ifaces[address] = name
    report: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "ifaces": ifaces,
        "python": platform.python_version(),
    }
    if os.environ.get("SLURMD_NODENAME"):  # one srun step probes every node at once
        # no GPU sampler step where no node has one (gpu_sampler.has_gpu_tools)
        report["gpu"] = os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi") is not None
        report["node"] = os.environ["SLURMD_NODENAME"]
    if number:
        report["port"] = _port_report(addr, number)
    print(json.dumps(report))
    return 0


def _port_report(addr: str, number: str | int) -> dict[str, Any]:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As c10d's TCPStore does: connections of an earlier run in TIME_WAIT don't count.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, int(number)))
        except OSError as exc:
            return {"free": False, "error": exc.strerror, "port": int(number), "addr": addr}
    return {"free": True, "error": "", "port": int(number), "addr": addr}


def port(addr: str, number: str) -> int:
    """Whether the rendezvous port can be bound on this node."""
    print(json.dumps(_port_report(addr, number)))
    return 0


def start_checks(port_check: list | None, ifname_for: str | None) -> tuple[str | None, str | None]:
    """The job helper's start: why the rendezvous port (`port_check`: address, port) cannot
    be bound, None when it can or is not asked; the interface holding `ifname_for`."""
    taken = _port_report(*port_check) if port_check else None
    ifname = _ifname_holding(ifname_for) if ifname_for else None
    return (str(taken["error"]) if taken and not taken["free"] else None), ifname
