"""The reaper's look at every process: which environments carry the job's tag."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.core.node import reaper

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def _start(procs: list[subprocess.Popen[bytes]], **env: str) -> int:
    """A child with this environment, once the kernel shows it: Popen returns when the exec
    has begun, and the new program's environment is in place a moment later."""
    proc = subprocess.Popen(SLEEP, env={"PATH": os.environ["PATH"], **env})
    procs.append(proc)
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{proc.pid}/environ").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc.pid


def _big(size: int) -> dict[str, str]:
    """Variables of `size` bytes in all (one string may not pass 128 KiB at exec)."""
    return {f"BIG{i}": "y" * 30000 for i in range(size // 30000 + 1)}


def test_only_the_exact_tag_is_found_wherever_it_sits(
    started: list[subprocess.Popen[bytes]],
) -> None:
    tag = f"run-{os.getpid()}.0"
    first = _start(started, DDPTUI_TAG=tag, AFTER="x")
    # an environment larger than one read, the tag at its very end
    last = _start(started, **_big(3 * reaper.ENVIRON_READ), DDPTUI_TAG=tag)
    longer = _start(started, DDPTUI_TAG=tag + "1")  # the next node's tag starts with it
    other = _start(started, XDDPTUI_TAG=tag, NOT=f"DDPTUI_TAG={tag}x")  # not its name

    found = reaper._tagged(tag)

    assert first in found and last in found
    assert longer not in found and other not in found
    assert reaper._tagged(tag + "1") == [longer]


def test_a_whole_environment_is_read_past_one_read(
    started: list[subprocess.Popen[bytes]],
) -> None:
    big = _big(2 * reaper.ENVIRON_READ)
    pid = _start(started, **big)
    expected = {"PATH": os.environ["PATH"], **big}
    assert reaper._environ(str(pid)) == b"".join(f"{k}={v}\0".encode() for k, v in expected.items())
