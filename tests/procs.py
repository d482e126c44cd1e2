"""Process checks the tests use to prove a job left nothing behind."""

from __future__ import annotations

import os


def pids_with_tag(prefix: str) -> list[int]:
    """PIDs whose environment has DDPTUI_TAG starting with `prefix` (a run id)."""
    needle = f"DDPTUI_TAG={prefix}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(item.startswith(needle) for item in env):
            found.append(int(name))
    return found
