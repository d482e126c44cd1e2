"""Provides LogFilter: which entries a log view shows (nodes, ranks, a regex); search patterns."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ddptui.ui.widgets.logs.log_entry import LogEntry


class FilterError(ValueError):
    """A filter the operator typed that cannot be used; the message says why."""


@dataclass(frozen=True)
class LogFilter:
    """Which entries a view shows: nodes, ranks (empty: all) and a regular expression."""

    nodes: frozenset[str] = frozenset()
    ranks: frozenset[int] = frozenset()
    pattern: re.Pattern[str] | None = None

    def accepts(self, entry: LogEntry) -> bool:
        if self.nodes and entry.node not in self.nodes:
            return False
        # the console's own notes about no one rank (skipped lines, a rendezvous) stay
        if self.ranks and entry.rank not in self.ranks and not (entry.note and entry.rank is None):
            return False
        return self.pattern is None or self.pattern.search(entry.text) is not None

    @property
    def active(self) -> bool:
        return bool(self.nodes or self.ranks or self.pattern)

    def describe(self) -> str:
        parts = [f"node:{n}" for n in sorted(self.nodes)]
        parts += [f"rank:{r}" for r in sorted(self.ranks)]
        if self.pattern is not None:
            parts.append(self.pattern.pattern)
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str, known_nodes: Sequence[str] = ()) -> LogFilter:
        """`node:local1 rank:3 rank:5 CUDA|NCCL`: node and rank terms, the rest a regex.

        An empty text is no filter. A node that is not one of `known_nodes` is refused, so a
        typo does not silently show nothing.
        """
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise FilterError(f"filter {text!r}: {exc}") from None
        nodes: set[str] = set()
        ranks: set[int] = set()
        rest: list[str] = []
        for word in words:
            key, sep, value = word.partition(":")
            if sep and key in ("node", "n"):
                if known_nodes and value not in known_nodes:
                    raise FilterError(f"no node {value!r}: the nodes are {', '.join(known_nodes)}")
                nodes.add(value)
            elif sep and key in ("rank", "r"):
                ranks.update(_rank_set(value))
            else:
                rest.append(word)
        return cls(frozenset(nodes), frozenset(ranks), compile_pattern(" ".join(rest)))


def _rank_set(value: str) -> set[int]:
    """`3`, `0-3` or `1,5`: ranks to keep."""
    ranks: set[int] = set()
    for part in value.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise FilterError(f"rank:{value}: expected a rank, a range 0-3 or a list 1,5")
        ranks.update(range(int(low), int(high or low) + 1))
    return ranks


def compile_pattern(text: str) -> re.Pattern[str] | None:
    """A search or filter regex; smart case: all lower case means case-insensitive."""
    if not text:
        return None
    flags = re.IGNORECASE if text == text.lower() else 0
    try:
        return re.compile(text, flags)
    except re.error as exc:
        raise FilterError(f"{text!r} is not a regular expression: {exc}") from None
