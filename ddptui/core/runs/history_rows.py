"""Provides a past run as the history table's columns, alike on the command line and on screen."""

from __future__ import annotations

import time

from ddptui.core.runs.history import RunRecord

HISTORY_COLUMNS = (
    "RUN", "STARTED", "TIME", "PROFILE", "BACKEND", "WHERE", "OUTCOME", "RANKS", "WHAT HAPPENED"
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
    """A run's cells; `short`: the start without year and seconds, the hosts as a range."""
    return (
        record.id,
        when(record.started, short),
        duration(record.duration),
        record.profile,
        record.backend,
        record.where_text(short),
        record.status,
        record.ranks_text(),
        record.detail.split("\n", 1)[0],  # the story's lead, as the summary opens with it
    )
