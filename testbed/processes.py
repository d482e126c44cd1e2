"""Process helpers of the testbed: which processes live in a namespace, and stopping by PID.

Why: tests prove "nothing left on that host" by listing the processes of a host's network
namespace, and the harness stops only processes it started, by PID, never by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any


def _netns_inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def pids_in_netns(ns_path: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose network namespace is ns_path."""
    want = _netns_inode(ns_path)
    if want is None:
        return []
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        if _netns_inode(f"/proc/{entry}/ns/net") == want:
            out.append(int(entry))
    return sorted(out)


def pids_by_netns(ns_paths: Sequence[str]) -> dict[str, list[int]]:
    """pids_in_netns for many namespaces in one pass over /proc (a fleet has hundreds)."""
    wanted: dict[tuple[int, int] | None, str] = {}
    for path in ns_paths:
        inode = _netns_inode(path)
        if inode is not None:
            wanted[inode] = path
    out: dict[str, list[int]] = {path: [] for path in ns_paths}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        found = wanted.get(_netns_inode(f"/proc/{entry}/ns/net"))
        if found is not None:
            out[found].append(int(entry))
    return {path: sorted(pids) for path, pids in out.items()}


def cmdline(pid: int) -> str:
    """Best-effort command line of a PID (for diagnostics)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def terminate(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def _alive(pid: int, procs: Sequence[subprocess.Popen[Any]]) -> bool:
    for p in procs:
        if p.pid == pid:
            return p.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie we cannot reap counts as gone
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_gone(
    pids: Sequence[int], procs: Sequence[subprocess.Popen[Any]], grace: float = 3.0
) -> None:
    """Wait for pids to exit; SIGKILL (by PID) whatever survives the grace period."""
    deadline = time.monotonic() + grace
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p, procs)]
        if alive:
            time.sleep(0.05)
    for pid in alive:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p, procs)]
        if alive:
            time.sleep(0.05)
