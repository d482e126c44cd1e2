"""Provides the jump targets of `jump to error`: each troubled rank's first error line, in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddptui.core.events import FailureRecord, RankChanged
from ddptui.core.monitor.diagnosis import HUNG, STRAGGLER, order_failures


@dataclass(frozen=True)
class JumpTarget:
    """A rank's first error line: its node, its line number there, and what it says."""

    node: str
    local_rank: int
    rank: int | None
    seq: int
    summary: str
    ts: float = 0.0


def first_error(event: RankChanged) -> JumpTarget | None:
    """The earliest line of the rank's output (or its agent's) that reports trouble."""
    lines = [d for d in event.diagnoses if d.seq is not None and d.kind not in (HUNG, STRAGGLER)]
    if not lines:
        return None
    first = min(lines, key=lambda d: d.seq or 0)
    assert first.seq is not None
    return JumpTarget(event.node, event.local_rank, event.rank, first.seq, first.summary, first.ts)


def jump_targets(
    ranks: Mapping[tuple[str, int], RankChanged], failures: Sequence[FailureRecord]
) -> list[JumpTarget]:
    """Ranks with an error line: torchrun's failures first observed first; then the others
    (a rank can report a timeout and still run, or be restarted) by when their first error
    line came, so a crash comes before the lost peers it causes; ties in grid order."""
    order: list[tuple[str, int]] = []
    for record in order_failures(failures):
        key = (record.node, record.local_rank)
        if key not in order:
            order.append(key)
    targets = [t for key in order if key in ranks and (t := first_error(ranks[key]))]
    others = [
        (target.ts, index, target)
        for index, (key, event) in enumerate(ranks.items())
        if key not in order and (target := first_error(event)) is not None
    ]
    return targets + [target for *_, target in sorted(others, key=lambda o: o[:2])]
