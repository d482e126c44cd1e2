"""An unprivileged user of the testbed's own, and a view of this machine's Python it may use.

Why: the console and the jobs must work for a user who is not root (where ptrace is
restricted, stacks are taken the way that needs none). The user exists only in the
testbed's /etc/netns/NS/passwd and group, bound over /etc in its namespaces: this machine's
/etc is untouched. The Python running the tests (and its torch) may live below a directory
such a user cannot enter (pyenv under /root, mode 0700), so each namespace's private mount
namespace covers that directory with a tmpfs that holds only the ways through to what the
user needs, bound back in: the real directory and its mode stay as they are, and nothing of
it is visible beyond the paths named.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .commands import TestbedError

USER_NAME = "ddpuser"
USER_ID = 4242


@dataclass(frozen=True)
class PlainUser:
    """The testbed's unprivileged user: its name, ids and home (in the testbed's workdir)."""

    name: str
    uid: int
    gid: int
    home: Path

    @classmethod
    def create(cls, workdir: Path, name: str = USER_NAME, uid: int = USER_ID) -> PlainUser:
        home = workdir / f"home-{name}"
        home.mkdir(mode=0o755, exist_ok=True)
        os.chown(home, uid, uid)
        return cls(name, uid, uid, home)

    def passwd(self, base: str | None = None) -> str:
        """`base` (this machine's passwd by default) with the user added (its own lines stay
        as they are)."""
        text = Path("/etc/passwd").read_text() if base is None else base
        return text + f"{self.name}:x:{self.uid}:{self.gid}::{self.home}:/bin/sh\n"

    def group(self) -> str:
        return Path("/etc/group").read_text() + f"{self.name}:x:{self.gid}:\n"

    def own(self, path: Path, mode: int) -> Path:
        os.chown(path, self.uid, self.gid)
        os.chmod(path, mode)
        return path

    def as_user(self, argv: Iterable[str], **env: str) -> list[str]:
        """argv run as the user (setpriv: no PAM, no login), with a HOME of its own."""
        words = [f"{k}={v}" for k, v in {"HOME": str(self.home), "USER": self.name, **env}.items()]
        ids = [f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        return ["setpriv", *ids, "env", *words, *argv]


def needed_paths(root: Path) -> list[Path]:
    """What the user's processes read: this Python's installation and the project."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve(), root}
    return sorted(p.resolve() for p in paths)


def _closed(path: Path) -> bool:
    return not path.stat().st_mode & stat.S_IXOTH


def _blocked(path: Path) -> tuple[Path, Path] | None:
    """The first directory on the way to `path` others cannot enter, and its child on the way."""
    parts = path.parts
    for depth in range(1, len(parts) - 1):
        here = Path(*parts[: depth + 1])
        if here.is_dir() and _closed(here):
            return here, Path(*parts[: depth + 2])
    return None


def view_commands(paths: list[Path], stage: Path) -> list[str]:
    """Shell commands, run in a private mount namespace, after which every path in `paths`
    can be reached by anyone there. Raises TestbedError for a second closed directory
    further down (this view opens one level only)."""
    through: dict[Path, set[Path]] = {}
    for path in paths:
        found = _blocked(path)
        if found is not None:
            through.setdefault(found[0], set()).add(found[1])
    commands: list[str] = []
    for index, (closed, children) in enumerate(sorted(through.items())):
        moved = []
        for number, child in enumerate(sorted(children)):
            kept = stage / f"{index}-{number}"
            kept.mkdir(parents=True, exist_ok=True)
            moved.append((kept, child))
            commands.append(f"mount --rbind {shlex.quote(str(child))} {shlex.quote(str(kept))}")
        commands.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(closed))}")
        for kept, child in moved:
            make = "mkdir -p" if child.is_dir() else "touch"
            commands.append(f"{make} {shlex.quote(str(child))}")
            commands.append(f"mount --rbind {shlex.quote(str(kept))} {shlex.quote(str(child))}")
    for path in paths:
        below = [p for p in path.parents if any(p.is_relative_to(c) for c in through)]
        if any(p.is_dir() and _closed(p) and p not in through for p in below):
            raise TestbedError(f"{path}: more than one closed directory on its way")
    return commands


def yama_commands(stage: Path, scope: int = 1) -> list[str]:
    """Shell commands, run in a private mount namespace, after which the kernel there says
    Yama restricts ptrace (`ptrace_scope` = `scope`; 1, a process may trace only its
    descendants, is the usual default): a copy of /proc/sys/kernel, with yama/ptrace_scope,
    bound over it. This machine's kernel has no Yama; what reads the setting (the stacks
    collector) then decides as it would on such a node."""
    kernel = stage / "proc-sys-kernel"
    for source in Path("/proc/sys/kernel").rglob("*"):
        target = kernel / source.relative_to("/proc/sys/kernel")
        try:
            if source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read_bytes())
        except OSError:
            continue  # write-only or unreadable entries: nothing to read there anyway
    (kernel / "yama").mkdir(parents=True, exist_ok=True)
    (kernel / "yama" / "ptrace_scope").write_text(f"{scope}\n")
    return [f"mount --bind {shlex.quote(str(kernel))} /proc/sys/kernel"]
