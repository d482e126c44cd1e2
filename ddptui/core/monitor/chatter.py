"""Provides what a rank prints that is not its progress: torch's, NCCL's and ddptui's own lines.

A stall ends only when a rank really progresses (a step, a line of the user's own). On NCCL,
every flight-recorder dump the stall's collector asks for makes ProcessGroupNCCL print
"[rank0]:[E1126 16:29:14.269 ProcessGroupNCCL.cpp:1628] ... preparing to dump debug info" on
each rank: counted as output, that line ended the stall half a second after its stacks were
taken, and the next stall took them again (tests/data/stall/gpu_h100x2/console). The same holds
for the watchdog's own warnings, NCCL_DEBUG lines, torch's Python log lines and warnings,
torchft's logs, and anything ddptui itself writes into a rank's stream.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A cheap look at a whole block first: a block with none of these holds no chatter.
_CLUES = ("]:[", "NCCL", "torch", "Warning", "ddptui", "ProcessGroup")  # torchft has "torch"
_CHATTER = re.compile(
    r"^(?:\[rank\d+\]:)?\[?[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+"  # glog (c10, NCCL's PG), torch logging
    r"|^\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE)"  # NCCL_DEBUG
    r"|^(?:\[rank\d+\]:)?\s*\S*/torch/\S+:\d+: \w*Warning:"  # torch's own Python warnings
    r"|^(?:\[rank\d+\]:)?\s*(?:ddptui[:\]]|\[ddptui[\]:])"  # ddptui's own notes and probes
    r"|^\s*warnings\.warn\("  # the source line Python prints under a warning
    # torchft's own logs: its Rust core's (`2026-11-29T01:04:19.415 [INFO] [torchft::manager]
    # - ...`, about seven a step from every group's Manager) and its Python modules'
    r"|^\d{4}-\d\d-\d\dT[\d:.]+ \[(?:TRACE|DEBUG|INFO|WARN|ERROR)\] \[torchft::"
    r"|^(?:DEBUG|INFO|WARNING|ERROR) torchft[.:_]"  # its modules' and torchft_commits' loggers
)


# torchft's routine logs (not its warnings or errors): hidden from the log view with
# torchrun's own lines, shown by the same key, kept on disk.
_TORCHFT_ROUTINE = re.compile(
    r"^\d{4}-\d\d-\d\dT[\d:.]+ \[(?:TRACE|DEBUG|INFO)\] \[torchft::|^(?:DEBUG|INFO) torchft[.:_]"
)


def is_torchft_routine(line: str) -> bool:
    """torchft's own routine log line (INFO and below): its Manager's, its Lighthouse's."""
    return "torchft" in line and _TORCHFT_ROUTINE.search(line) is not None


def may_hold_chatter(text: str) -> bool:
    """Whether a block of lines may hold chatter (False: every line is the rank's own)."""
    return any(clue in text for clue in _CLUES)


def is_chatter(line: str) -> bool:
    """A line the rank printed that says nothing of its progress (torch's, NCCL's, ddptui's)."""
    return bool(_CHATTER.search(line))


def idle_ranks(texts: Sequence[str], local_ranks: Sequence[int | None]) -> frozenset[int | None]:
    """The local ranks of a block whose every line is chatter: they printed, but no progress."""
    spoke: set[int | None] = set()
    for text, local_rank in zip(texts, local_ranks, strict=True):
        if local_rank not in spoke and not is_chatter(text):
            spoke.add(local_rank)
    return frozenset(set(local_ranks) - spoke)
