"""Process checks the tests use to prove a job left nothing behind."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from typing import Any


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


def until_running(proc: subprocess.Popen[str], ranks: int = 4, timeout: float = 240) -> str:
    """Read a headless run's events until `ranks` ranks run; its run id."""
    assert proc.stdout is not None
    running: set[int] = set()
    run_id = ""
    deadline = time.monotonic() + timeout
    while len(running) < ranks and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        if event["event"] == "plan":
            run_id = event["run_id"]
        if event["event"] == "rank" and event["state"] == "running":
            running.add(event["rank"])
    assert len(running) == ranks
    return run_id


def outputs(proc: subprocess.Popen[Any], timeout: float) -> tuple[Any, Any]:
    """(stdout, stderr) to the end once `proc` exits, as `proc.communicate(timeout=...)` gives
    them, but read through the pipes' file objects: `communicate` with a timeout reads the raw
    descriptors and loses what an earlier `readline` had buffered (a line cut in two). On
    timeout the process is killed and `subprocess.TimeoutExpired` raised."""
    if proc.stdin is not None:
        proc.stdin.close()
    said: dict[str, Any] = {}

    def read(name: str, pipe: Any) -> None:
        said[name] = pipe.read()

    readers = [
        threading.Thread(target=read, args=(name, pipe), daemon=True)
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr))
        if pipe is not None
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        where = stacks_of(proc.pid)  # what it waits on: the failure's report shows stderr
        print(f"{shlex.join(map(str, proc.args))} still running:\n{where}", file=sys.stderr)
        proc.kill()
        proc.wait()
        raise subprocess.TimeoutExpired(proc.args, timeout, output=where) from None
    if any(reader.is_alive() for reader in readers):  # a child of its holds a pipe open
        raise subprocess.TimeoutExpired(proc.args, timeout)
    return said.get("stdout"), said.get("stderr")


def stacks_of(pid: int) -> str:
    """Every thread's stack in a Python process (py-spy), and its children, in words."""
    try:
        dump = subprocess.run(
            ["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        )
        children = subprocess.run(
            ["ps", "-o", "pid,stat,args", "--ppid", str(pid)], capture_output=True, text=True
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no stacks of {pid}: {exc}"
    return f"{dump.stdout}{dump.stderr}\nchildren:\n{children.stdout}"
