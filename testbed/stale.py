"""Recovery from a harness run that died before its teardown.

Why: a SIGKILLed pytest (CI timeout, Ctrl-C twice) leaves namespaces, /etc/netns dirs,
sshd/slurmd/munged behind; the next run should start clean instead of failing on clashes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .processes import cmdline, pids_in_netns, terminate, wait_gone


def cleanup_stale(prefix_re: str = r"dt(\d+)(x\d+)?") -> list[str]:
    """Remove testbeds left by a harness process that died (e.g. SIGKILLed pytest).

    Only namespaces named like ours whose creating PID is gone are touched: processes
    in them, and processes whose command line names that testbed's private work dir
    (munged lives outside the namespaces), are killed by PID; then all is deleted."""
    removed: list[str] = []
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    stale: dict[str, str] = {}
    for line in names.splitlines():
        ns = line.split()[0] if line.split() else ""
        m = re.fullmatch(prefix_re + r"-(br|head|h\d+)", ns)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            stale[ns] = ns.rsplit("-", 1)[0]
    if not stale:
        return removed
    prefixes = set(stale.values())
    dirs = [str(p) for pre in prefixes for p in Path(tempfile.gettempdir()).glob(f"{pre}-*")]
    victims = {pid for ns in stale for pid in pids_in_netns(f"/run/netns/{ns}")}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and any(d in cmdline(int(entry)) for d in dirs):
            victims.add(int(entry))
    victims.discard(os.getpid())
    for pid in victims:
        terminate(pid)
    wait_gone(sorted(victims), [])
    for ns in stale:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        removed.append(ns)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    return removed
