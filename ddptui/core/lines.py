"""Provides line framing and rank attribution of a node's raw output, whatever the script prints.

torchrun (with --tee and our prefix template) writes `[ddptui:<rank>:<local_rank>]:` before each
worker line. Its tail threads read worker files line by line, so a worker that writes a line in
two pieces produces a prefixed fragment with no newline, and the next worker's line is glued on:
`[ddptui:1:1]:partial[ddptui:0:0]:hello`. The splitter below undoes that: a segment that is not
the last on its physical line is a fragment, kept until the same rank's next segment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = re.compile(r"\[ddptui:(\d+):(\d+)\]:")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
MAX_LINE = 64 * 1024


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


class LineFramer:
    """Turns byte chunks into text lines; a line split across chunks is joined, never lost."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self._rest + chunk
        *lines, self._rest = data.split(b"\n")
        if len(self._rest) > MAX_LINE:
            lines.append(self._rest)
            self._rest = b""
        return [self._decode(line) for line in lines]

    def flush(self) -> list[str]:
        rest, self._rest = self._rest, b""
        return [self._decode(rest)] if rest else []

    @staticmethod
    def _decode(raw: bytes) -> str:
        return strip_ansi(raw.decode("utf-8", errors="replace").rstrip("\r"))


@dataclass(frozen=True)
class Attributed:
    """A logical line and the rank that wrote it (None for the agent or unprefixed output)."""

    text: str
    rank: int | None = None
    local_rank: int | None = None


class RankAttributor:
    """Splits one node's lines into per-rank logical lines, joining fragments of the same rank."""

    def __init__(self) -> None:
        self._fragments: dict[tuple[int, int], str] = {}

    def feed(self, line: str) -> list[Attributed]:
        matches = list(PREFIX.finditer(line))
        if not matches:
            return [Attributed(line)]
        out: list[Attributed] = []
        head = line[: matches[0].start()]
        if head:
            out.append(Attributed(head))
        for i, match in enumerate(matches):
            key = (int(match.group(1)), int(match.group(2)))
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            text = self._fragments.pop(key, "") + line[match.end() : end]
            if i + 1 < len(matches):
                self._fragments[key] = text
            else:
                out.append(Attributed(text, *key))
        return out

    def flush(self) -> list[Attributed]:
        """Fragments still waiting for their newline, when the node's output ends."""
        out = [Attributed(text, *key) for key, text in self._fragments.items()]
        self._fragments.clear()
        return out
