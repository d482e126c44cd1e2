"""Provides what the console asks of a node's network before a job: which interface holds
which address, whether the rendezvous port can be bound and, when it cannot, who holds it
(the job helper's `probe` and `port`, and its start's checks).

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
        report["port"] = port_report(addr, number)
    print(json.dumps(report))
    return 0


def port_report(addr: str, number: str | int, tag_var: str = "") -> dict[str, Any]:
    """Whether (addr, port) can be bound; when it cannot, who listens on the port here
    (`holders`, with each one's job tag when `tag_var` names it), the words for the operator
    (`why`) and a port that is free there now (`free_port`)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As c10d's TCPStore does: connections of an earlier run in TIME_WAIT don't count.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, int(number)))
        except OSError as exc:
            holders = port_holders(int(number), tag_var)
            why = (
                "in use by " + holder_words(holders[0])
                if holders
                else f"not available ({exc.strerror})"
            )
            return {
                "free": False,
                "error": why,
                "why": why,
                "holders": holders,
                "free_port": _any_free_port(addr),
                "port": int(number),
                "addr": addr,
            }
    return {"free": True, "error": "", "port": int(number), "addr": addr}


def _any_free_port(addr: str) -> int | None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, 0))
        except OSError:
            return None
        return int(s.getsockname()[1])


def _listening_inodes(number: int) -> dict[str, int]:
    """Socket inode -> owner's uid of every TCP socket listening on `number` here (IPv4 and
    IPv6, any address): the kernel's own tables, readable by every user."""
    found: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == number:
                found[cols[9]] = int(cols[7])
    return found


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def port_holders(number: int, tag_var: str = "") -> list[dict[str, Any]]:
    """Who listens on TCP port `number` on this node: for each listening socket, the process
    holding it (found through /proc/*/fd; one of another user is seen only as root), its
    user, command line and, when `tag_var` is given, the job tag in its environment."""
    import pwd

    inodes = _listening_inodes(number)
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    holders: list[dict[str, Any]] = []
    seen: set[str] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{name}/fd/{fd}")
            except OSError:
                continue
            inode = wanted.get(link)
            if inode is None or inode in seen:
                continue
            seen.add(inode)
            cmd = _read(f"/proc/{name}/cmdline").replace(b"\0", b" ").decode(errors="replace")
            tag = ""
            if tag_var:
                prefix = (tag_var + "=").encode()
                for item in _read(f"/proc/{name}/environ").split(b"\0"):
                    if item.startswith(prefix):
                        tag = item[len(prefix) :].decode(errors="replace")
            holders.append({"pid": int(name), "uid": inodes[inode], "cmd": cmd.strip(), "tag": tag})
    for inode, uid in inodes.items():
        if inode not in seen:  # a process this user may not look into
            holders.append({"pid": None, "uid": uid, "cmd": "", "tag": ""})
    for holder in holders:
        try:
            holder["user"] = pwd.getpwuid(holder["uid"]).pw_name
        except KeyError:
            holder["user"] = str(holder["uid"])
    return holders


def holder_words(holder: dict[str, Any]) -> str:
    """`PID 1234 (user alice, python3 serve.py)`, as the operator reads it."""
    if holder.get("pid") is None:
        return f"a process of user {holder['user']} (this user cannot see which)"
    cmd = " ".join(holder["cmd"].split())
    cmd = cmd if len(cmd) <= 60 else cmd[:57] + "..."
    return f"PID {holder['pid']} (user {holder['user']}, {cmd or '?'})"


def port(addr: str, number: str, tag_var: str = "") -> int:
    """Whether the rendezvous port can be bound on this node, and who holds it if not."""
    print(json.dumps(port_report(addr, number, tag_var)))
    return 0


def start_checks(port_check: list | None, ifname_for: str | None) -> tuple[str | None, str | None]:
    """The job helper's start: the port report (JSON) when the rendezvous port (`port_check`:
    address, port) cannot be bound, None when it can or is not asked; the interface holding
    `ifname_for`."""
    taken = port_report(*port_check) if port_check else None
    ifname = _ifname_holding(ifname_for) if ifname_for else None
    return (json.dumps(taken) if taken and not taken["free"] else None), ifname
