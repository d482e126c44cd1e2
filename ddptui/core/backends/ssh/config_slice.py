"""Provides `config_for`: the part of an ssh_config that concerns one host, for asyncssh.

Why: asyncssh parses the whole ssh_config for every connection (it matches Host blocks as it
reads), twice per connection here (the options we read, then its own). A config with a block
per host, as generated ones often have, makes that quadratic in the number of hosts: with
256 blocks a parse took some 70 ms of CPU, so connecting 256 hosts spent half a minute
parsing. A host's slice is the lines before the first Host line plus every Host block whose
patterns match the host, in their order: for a config made only of Host blocks and ordinary
keywords, a block that does not match the host contributes nothing, so asyncssh reads from
the slice exactly what it would read from the whole file.

Host lines are matched by asyncssh's own rule (asyncssh.pattern), so a slice keeps exactly
the blocks asyncssh would apply. Anything this cannot be sure of (Match, Include,
CanonicalizeHostname, which make a block's effect depend on more than the host's name) means
no slice: the whole file, as before.
Slices are written once per host into a private directory removed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from asyncssh.pattern import WildcardPatternList

_UNSLICEABLE = frozenset({"match", "include", "canonicalizehostname"})


class _Sliced:
    """One config file, cut into its head and its Host blocks."""

    def __init__(self, text: str) -> None:
        self.head: list[str] = []
        self.blocks: list[tuple[list[str], list[str]]] = []  # (patterns, lines)
        self.sliceable = True
        for raw in text.splitlines():
            line = raw.strip()
            key = line.replace("=", " ", 1).partition(" ")[0].lower()
            if key in _UNSLICEABLE:
                self.sliceable = False
                return
            if key == "host":
                patterns = line.replace("=", " ", 1).partition(" ")[2].split()
                self.blocks.append(([p.strip('"') for p in patterns], [raw]))
            elif self.blocks:
                self.blocks[-1][1].append(raw)
            else:
                self.head.append(raw)
        # Blocks naming one plain host are found by name (one per host is the common case).
        self._by_name: dict[str, list[int]] = {}
        self._patterned: list[int] = []
        for index, (patterns, _) in enumerate(self.blocks):
            if len(patterns) == 1 and not any(c in patterns[0] for c in "*?!,"):
                self._by_name.setdefault(patterns[0], []).append(index)
            else:
                self._patterned.append(index)

    def text_for(self, host: str) -> str:
        chosen = set(self._by_name.get(host, ()))
        chosen.update(i for i in self._patterned if _matches(self.blocks[i][0], host))
        lines = list(self.head)
        for index in sorted(chosen):
            lines += self.blocks[index][1]
        return "\n".join(lines) + "\n"


def _matches(patterns: list[str], host: str) -> bool:
    """asyncssh's own rule for a Host line (its words joined as one comma list)."""
    return bool(WildcardPatternList(",".join(patterns)).matches(host))


_parsed: dict[str, tuple[tuple[int, int, int], _Sliced]] = {}
_written: dict[tuple[str, str], str] = {}
_folder: str | None = None


def _slices_folder() -> str:
    global _folder
    if _folder is None:
        _folder = tempfile.mkdtemp(prefix="ddptui-ssh-config-")  # mode 0700
        atexit.register(shutil.rmtree, _folder, True)
    return _folder


def config_for(path: str, host: str) -> str:
    """A config file for `host` with the same effect as `path` has for it: its slice, or
    `path` itself when the file cannot be sliced for sure (or read)."""
    try:
        st = os.stat(path)
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = _parsed.get(path)
        if cached is None or cached[0] != stamp:
            cached = (stamp, _Sliced(Path(path).read_text()))
            _parsed[path] = cached
            for key in [k for k in _written if k[0] == path]:
                del _written[key]
    except (OSError, UnicodeDecodeError):
        return path
    sliced = cached[1]
    if not sliced.sliceable:
        return path
    if (path, host) not in _written:
        target = os.path.join(_slices_folder(), f"{len(_written)}.config")
        with contextlib.suppress(OSError):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(sliced.text_for(host))
            _written[(path, host)] = target
    return _written.get((path, host), path)
