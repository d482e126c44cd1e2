"""Provides line framing and rank attribution of a node's raw output, whatever the script prints.

torchrun (with --tee and our prefix template) writes `[ddptui:<rank>:<local_rank>]:` before each
worker line. Its tail threads read worker files line by line, so a worker that writes a line in
two pieces produces a prefixed fragment with no newline, and the next worker's line is glued on:
`[ddptui:1:1]:partial[ddptui:0:0]:hello`. The splitter below undoes that: a segment that is not
the last on its physical line is a fragment, kept until the same rank's next segment.
"""

from __future__ import annotations

import re
from typing import NamedTuple

PREFIX = re.compile(r"\[ddptui:(\d+):(\d+)\]:")
# A whole line that is one prefix and its text: the common case, taken a block at a time.
_PREFIXED_LINE = re.compile(r"^(\[ddptui:\d+:\d+\]:)(.*)$", re.MULTILINE)
# A launcher that reports a worker's end itself (srun direct: `srun: error: n2: task 3:
# Terminated`) has its demuxer write this rank-prefixed line, the launcher's words after it.
WORKER_ENDED = "ddptui: worker ended: "
_WORKER_ENDED = re.compile(r"^ddptui: worker ended: exit (-?\d+)(, stopped by the launcher)?")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
_TRAILING_CR = re.compile(r"\r+$", re.MULTILINE)
MAX_LINE = 64 * 1024
MAX_PREFIXES = 65_536  # distinct rank prefixes remembered parsed


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def worker_ended_line(exit_code: int, stopped: bool, said: str) -> str:
    """The line (without its rank prefix) that tells the monitor how a worker ended.

    `stopped`: the launcher stopped it (because another task failed, or at teardown).
    """
    how = ", stopped by the launcher" if stopped else ""
    return f"{WORKER_ENDED}exit {exit_code}{how} | {said}"


def worker_ended(text: str) -> tuple[int, bool] | None:
    """(exit code, stopped by the launcher) of a `worker_ended_line`, else None."""
    match = _WORKER_ENDED.match(text)
    return (int(match.group(1)), match.group(2) is not None) if match else None


class LineFramer:
    """Turns byte chunks into text lines; a line split across chunks is joined, never lost.

    `block` hands a chunk's complete lines as one string (lines joined by newlines), so the
    per-line work that follows can run over the whole block at once.
    """

    def __init__(self) -> None:
        self._rest = b""

    def block(self, chunk: bytes) -> str | None:
        """The complete lines so far, joined by newlines; None while no line is complete."""
        data = self._rest + chunk if self._rest else chunk
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) > MAX_LINE:
                self._rest = b""
                return self._decode(data)
            self._rest = data
            return None
        self._rest = data[end + 1 :]
        if len(self._rest) > MAX_LINE:
            self._rest = b""
            return self._decode(data)
        return self._decode(data[:end])

    def feed(self, chunk: bytes) -> list[str]:
        block = self.block(chunk)
        return [] if block is None else block.split("\n")

    def flush(self) -> list[str]:
        rest, self._rest = self._rest, b""
        return [self._decode(rest)] if rest else []

    @staticmethod
    def _decode(raw: bytes) -> str:
        text = raw.decode("utf-8", errors="replace")
        if "\r" in text:
            text = _TRAILING_CR.sub("", text)
        return strip_ansi(text)


class Attributed(NamedTuple):
    """A logical line and the rank that wrote it (None for the agent or unprefixed output)."""

    text: str
    rank: int | None = None
    local_rank: int | None = None


class RankAttributor:
    """Splits one node's lines into per-rank logical lines, joining fragments of the same rank."""

    def __init__(self) -> None:
        self._fragments: dict[tuple[int, int], str] = {}
        self._ranks: dict[str, tuple[int, int]] = {}  # prefix -> (rank, local rank)

    def feed(self, line: str) -> list[Attributed]:
        return self.feed_block(line)

    def feed_block(self, block: str) -> list[Attributed]:
        """The logical lines of complete physical lines joined by newlines, in order.

        One split of the whole block by the prefix: each prefix's segment runs to the next
        prefix; a segment with no newline before the next prefix is a fragment.
        """
        if "[ddptui:" not in block:
            return [Attributed(line) for line in block.split("\n")]
        if not self._fragments:
            whole = self._whole_lines(block)
            if whole is not None:
                return whole
        parts = PREFIX.split(block)
        out: list[Attributed] = []
        last = len(parts) - 3
        _loose(parts[0], out, last < 1)
        fragments = self._fragments
        for i in range(1, len(parts), 3):
            rank, local_rank, segment = int(parts[i]), int(parts[i + 1]), parts[i + 2]
            newline = segment.find("\n")
            text = segment if newline < 0 else segment[:newline]
            if fragments:
                text = fragments.pop((rank, local_rank), "") + text
            if newline < 0 and i != last:
                fragments[(rank, local_rank)] = text
                continue
            out.append(_new(Attributed, (text, rank, local_rank)))
            if newline >= 0 and (newline != len(segment) - 1 or i == last):
                _loose(segment[newline + 1 :], out, i == last)
        return out

    def _whole_lines(self, block: str) -> list[Attributed] | None:
        """The block's lines when each starts with a prefix and holds no other: one regex
        pass, each distinct prefix parsed once. None when the block is not that simple."""
        lines = block.count("\n") + 1
        if block.count("[ddptui:") != lines:
            return None
        one = self._one_rank(block, lines)
        if one is not None:
            return one
        found = _PREFIXED_LINE.findall(block)
        if len(found) != lines:
            return None
        ranks = self._ranks
        try:
            return [_new(Attributed, (text,) + ranks[prefix]) for prefix, text in found]
        except KeyError:
            if len(ranks) > MAX_PREFIXES:
                ranks.clear()
            for prefix, _ in found:
                if prefix not in ranks:
                    match = PREFIX.match(prefix)
                    assert match is not None
                    ranks[prefix] = (int(match.group(1)), int(match.group(2)))
            return [_new(Attributed, (text,) + ranks[prefix]) for prefix, text in found]

    def _one_rank(self, block: str, lines: int) -> list[Attributed] | None:
        """The block's lines when every one starts with the first line's prefix (one rank's
        lines, as a node with one process sends): the prefixes cut by one replace, no regex
        (0.59 against 0.79 us a line). None when the block is not that."""
        end = block.find("]:", 8) + 2
        prefix = block[:end]
        if end < 2 or block.count("\n" + prefix) != lines - 1:  # the first line is by `end`
            return None
        rank = self._ranks.get(prefix)
        if rank is None:
            match = PREFIX.fullmatch(prefix)
            if match is None:
                return None
            if len(self._ranks) > MAX_PREFIXES:
                self._ranks.clear()
            rank = self._ranks[prefix] = (int(match.group(1)), int(match.group(2)))
        r, local = rank
        texts = block.replace("\n" + prefix, "\n")[end:].split("\n")
        return [_new(Attributed, (text, r, local)) for text in texts]

    def flush(self) -> list[Attributed]:
        """Fragments still waiting for their newline, when the node's output ends."""
        out = [Attributed(text, *key) for key, text in self._fragments.items()]
        self._fragments.clear()
        return out


_new = tuple.__new__  # Attributed(...) without its Python-level __new__: the hot path


def _loose(text: str, out: list[Attributed], ends_block: bool) -> None:
    """Unprefixed lines; the last piece is a whole line only at the block's end (else it is
    the text before a prefix on the same line, kept as a line of its own if not empty)."""
    *whole, tail = text.split("\n")
    out.extend(Attributed(line) for line in whole)
    if tail or ends_block:
        out.append(Attributed(tail))
