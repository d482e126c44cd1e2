"""Provides a past run as the history table's columns, alike on the command line and on screen."""

from __future__ import annotations

import time

from ddptui.core.runs.history import RunRecord

HISTORY_COLUMNS = ("RUN", "STARTED", "TIME", "PROFILE", "BACKEND", "WHERE", "OUTCOME", "RANKS")


def when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def history_row(record: RunRecord) -> tuple[str, ...]:
    return (
        record.id,
        when(record.started),
        duration(record.duration),
        record.profile,
        record.backend,
        record.where,
        record.status,
        record.ranks_text(),
    )
