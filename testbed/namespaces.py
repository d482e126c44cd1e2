"""Provides `HostNamespaces`: what a service started in the testbed's hosts (sshd, dockerd) needs
of the testbed, so that those services never import the `Testbed` that starts them."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from .users import PlainUser


class HostNamespaces(Protocol):
    """The testbed as its services see it (`netns.Testbed` is one)."""

    hosts: list[str]
    head: str
    prefix: str
    workdir: Path
    user: PlainUser | None
    daemon_pids: set[int]

    def host_ip(self, name: str) -> str: ...

    def enter_argv(self, where: str, argv: Sequence[str]) -> list[str]: ...

    def track(self, p: subprocess.Popen[Any], *, daemon: bool = False) -> None: ...

    def run(
        self,
        where: str,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 60,
        set_hostname: bool = False,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[str]: ...
