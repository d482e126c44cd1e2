"""Provides the testbed's setup commands: its error, the check of its prerequisites, and
running `ip -batch` or another setup command with its stderr in the error."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from .iproute import ip_batch

REQUIRED_TOOLS = ("ip", "unshare", "nsenter")


class TestbedError(RuntimeError):
    """Raised when the testbed cannot be built or a prerequisite is missing."""

    __test__ = False  # not a pytest test class


def check_prerequisites(tools: Sequence[str] = REQUIRED_TOOLS) -> None:
    """Fail loudly (never skip) when not root or a needed tool is missing."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (network namespaces, sshd, slurmd)")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        problems.append("missing tools on PATH: " + ", ".join(missing))
    if problems:
        raise TestbedError("testbed prerequisites not met: " + "; ".join(problems))


def ip_batch_checked(ns: str | None, commands: Sequence[str]) -> None:
    """Run `ip -batch` (in namespace `ns`, or here); raise with what it said on failure."""
    error = ip_batch(ns, commands)
    if error is not None:
        raise TestbedError(error)


def setup_command(argv: Sequence[str], timeout: float = 30) -> str:
    """Run a setup command; raise with its stderr on failure."""
    cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if cp.returncode != 0:
        raise TestbedError(f"{' '.join(argv)} failed ({cp.returncode}): {cp.stderr.strip()}")
    return cp.stdout
