"""Provides the jump targets of `jump to error`: each troubled rank's first error line, in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddptui.core.diagnosis import HUNG, STRAGGLER, order_failures
from ddptui.core.events import FailureRecord, RankChanged, RankState


@dataclass(frozen=True)
class JumpTarget:
    """A rank's first error line: its node, its line number there, and what it says."""

    node: str
    local_rank: int
    rank: int | None
    seq: int
    summary: str


def first_error(event: RankChanged) -> JumpTarget | None:
    """The earliest line of the rank's output (or its agent's) that reports trouble."""
    lines = [d for d in event.diagnoses if d.seq is not None and d.kind not in (HUNG, STRAGGLER)]
    if not lines:
        return None
    first = min(lines, key=lambda d: d.seq or 0)
    assert first.seq is not None
    return JumpTarget(event.node, event.local_rank, event.rank, first.seq, first.summary)


def jump_targets(
    ranks: Mapping[tuple[str, int], RankChanged], failures: Sequence[FailureRecord]
) -> list[JumpTarget]:
    """Ranks with an error line: torchrun's failures first observed first, then failed ranks,
    then the others (a rank can report a timeout and still run), each in grid order."""
    order: list[tuple[str, int]] = []
    for record in order_failures(failures):
        key = (record.node, record.local_rank)
        if key not in order:
            order.append(key)
    failed = [k for k, e in ranks.items() if e.state == RankState.FAILED and k not in order]
    rest = [k for k in ranks if k not in order and k not in failed]
    targets = []
    for key in [*order, *failed, *rest]:
        event = ranks.get(key)
        target = first_error(event) if event is not None else None
        if target is not None:
            targets.append(target)
    return targets
