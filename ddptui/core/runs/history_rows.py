"""Provides a past run as the history table's columns, alike on the command line and on screen."""

from __future__ import annotations

import time

from ddptui.core.runs.attempts import Attempt
from ddptui.core.runs.history import RunRecord

HISTORY_COLUMNS = (
    "RUN", "STARTED", "TIME", "PROFILE", "BACKEND", "WHERE", "OUTCOME", "ATTEMPTS", "GOODPUT",
    "RANKS", "WHAT HAPPENED",
)  # fmt: skip


def when(ts: float, short: bool = False) -> str:
    """`2026-11-26 04:21:26`; where room is short, as `ps` gives STIME: `04:21` today,
    `Nov26` before."""
    if not short:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    today = time.localtime()[:3] == time.localtime(ts)[:3]
    return time.strftime("%H:%M" if today else "%b%d", time.localtime(ts))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def history_row(record: RunRecord, short: bool = False) -> tuple[str, ...]:
    """A run's cells, its attempts counted (a restart, a requeue, a relaunch); `short`: the
    start without year and seconds, the hosts as a range."""
    return (
        record.id,
        when(record.started, short),
        duration(record.duration),
        record.profile,
        record.backend,
        record.where_text(short),
        record.status,
        str(len(record.attempts) or 1),
        record.goodput_text(),
        record.ranks_text(),
        record.detail.split("\n", 1)[0],  # the story's lead, as the summary opens with it
    )


def attempt_line(attempt: Attempt, short: bool = False, told: str = "") -> str:
    """`#2 requeue  04:21 -> 04:23 (1:35)  torn down: <how>`: one attempt in a line; why it
    began in brackets after its cause, unless `told` (the line before ended saying it)."""
    end = when(attempt.ended, short) if attempt.ended is not None else "…"
    how = attempt.outcome or "running"
    said = f"{how}: {attempt.detail}" if attempt.detail and attempt.detail != how else how
    why = f" ({attempt.why})" if attempt.why and attempt.why != told else ""
    span = f"{when(attempt.started, short)} -> {end} ({duration(attempt.duration)})"
    return f"#{attempt.index} {attempt.cause.value}{why}  {span}  {said}"


def attempt_lines(record: RunRecord, short: bool = False) -> list[str]:
    """Each attempt of a run in a line, in order; none for a run that ran once."""
    if len(record.attempts) < 2:
        return []
    told = ["", *(a.detail for a in record.attempts[:-1])]
    return [attempt_line(a, short, t) for a, t in zip(record.attempts, told, strict=True)]
