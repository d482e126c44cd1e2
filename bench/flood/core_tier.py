"""Provides the log flood's core tier: JobWatch.feed and what follows it (relay, merged rows,
folding) timed per CPU-second in one process, and a batched prototype's floor.

Kept apart from bench/flood/log_flood.py, which drives this in a fresh process (`--child core`).
"""

from __future__ import annotations

import os
import time
from typing import Any

NODES = 16
SCREEN_ROWS = 50  # the rows a following merged view draws each tick


def _batched_floor(chunks: list[tuple[str, bytes]]) -> int:
    """Prototype, not ddptui: one batch per chunk, per line only the split, the decode (of
    the whole chunk at once) and the rank prefix. What the per-line work costs at least."""
    from ddptui.core.monitor.framing import PREFIX

    rest: dict[str, bytes] = {}
    match, count = PREFIX.match, 0
    for node, chunk in chunks:
        data = rest.get(node, b"") + chunk
        cut = data.rfind(b"\n") + 1
        rest[node] = data[cut:]
        batch: list[tuple[int | None, int | None, str]] = []
        for line in data[:cut].decode("utf-8", "replace").split("\n")[:-1]:
            m = match(line)
            if m and line.find("[ddptui:", m.end()) < 0:
                batch.append((int(m.group(1)), int(m.group(2)), line[m.end() :]))
            else:
                batch.append((None, None, line))
        count += len(batch)
    return count


CORE_TIERS = (
    "Monitor.feed",
    "Monitor.feed + SessionRelay.emit and drain",
    "... + the merged view's rows",
    "... + the merged view's rows, folding repeated lines",
    "prototype: one batch per chunk (split, decode, rank prefix)",
)


def _core_tier(tier: str, nodes: list[str], chunks: list[tuple[str, bytes]]) -> int:
    from ddptui.core.diagnose.job_watch import JobWatch
    from ddptui.ui.relay import SessionRelay

    if tier.startswith("prototype"):
        return _batched_floor(chunks)
    try:
        monitor = JobWatch(nodes, 1, metrics=os.environ.get("FLOOD_METRICS", "1") != "0")
    except TypeError:  # a tree from before metrics were read (a --baseline)
        monitor = JobWatch(nodes, 1)
    relay = SessionRelay(lambda _: None) if "Relay" in tier or "view" in tier else None
    merged = _MergedRows(fold="folding" in tier) if "view" in tier else None
    count = 0
    for index, (node, chunk) in enumerate(chunks):
        events = monitor.feed(node, chunk)
        count += len(events)
        if relay is not None:
            for event in events:
                relay.emit(event)
            if index % NODES == NODES - 1:  # the screen drains once per round
                entries, _dropped = relay.drain()
                if merged is not None:
                    merged.append(entries)
    return count


def _fold_cost(nodes: list[str], chunks: list[tuple[str, bytes]]) -> dict[str, float]:
    """Folding's cost against the whole ingest: the drained entries of one run, shown in a
    merged view with and without folding, five times alternating, the fastest of each."""
    from ddptui.core.diagnose.job_watch import JobWatch
    from ddptui.ui.relay import SessionRelay

    monitor, relay = JobWatch(nodes, 1), SessionRelay(lambda _: None)
    batches: list[list[Any]] = []
    t0 = time.process_time()
    for index, (node, chunk) in enumerate(chunks):
        for event in monitor.feed(node, chunk):
            relay.emit(event)
        if index % NODES == NODES - 1:
            batches.append(relay.drain()[0])
    ingest_s = time.process_time() - t0
    best = {False: float("inf"), True: float("inf")}
    for _ in range(5):
        for fold in (False, True):
            merged = _MergedRows(fold)
            t0 = time.process_time()
            for batch in batches:
                merged.append(batch)
            best[fold] = min(best[fold], time.process_time() - t0)
    return {
        "ingest_s": ingest_s,
        "rows_s": best[False],
        "fold_extra_s": best[True] - best[False],
        "lines": float(sum(map(len, batches))),
    }


def core_child(lines_per_node: int) -> dict[str, Any]:
    from testbed.standins.flood_node import flood_lines

    nodes = [f"local{i}" for i in range(NODES)]
    data = {n: flood_lines(f"[ddptui:{i}:0]:", 0, lines_per_node) for i, n in enumerate(nodes)}
    longest = max(map(len, data.values()))
    chunks = [(n, data[n][o : o + (1 << 16)]) for o in range(0, longest, 1 << 16) for n in nodes]
    del data
    out: dict[str, Any] = {}
    for tier in CORE_TIERS:
        t0 = time.process_time()
        count = _core_tier(tier, nodes, chunks)
        out[tier] = {
            "lines_per_s": lines_per_node * NODES / (time.process_time() - t0),
            "events": count,
        }
    out["fold"] = _fold_cost(nodes, chunks)
    return out


class _MergedRows:
    """What the merged LogView does with a tick's entries, without the widget: its rows, and
    with folding on, the fold (bench only; ddptui.ui.widgets.logs.log_view is the real one)."""

    def __init__(self, fold: bool) -> None:
        from ddptui.ui.widgets.logs.log_filter import LogFilter
        from ddptui.ui.widgets.logs.log_fold import LineFolder

        self.fold, self.filter, self.folder = fold, LogFilter(), LineFolder()
        self.rows: list[Any] = []
        self.texts: list[str] = []
        self.stale: dict[int, Any] = {}

    def append(self, entries: list[Any]) -> None:
        from ddptui.ui.widgets.logs.log_fold import rank_set
        from ddptui.ui.widgets.logs.log_rows import rows_for

        joined: dict[int, Any] = {}
        if self.fold:
            entries, joined = self.folder.fold(entries, len(self.rows))
        rows, texts = rows_for(entries, self.filter, merged=True, timestamps=False, width=0)
        self.rows += rows
        self.texts += texts
        self.stale.update(joined)
        # As LogView: a following view draws its bottom rows each tick, and a folded row is
        # made into its text (the rank set, the numbers' ranges) when it is drawn.
        for row in range(max(0, len(self.rows) - SCREEN_ROWS), len(self.rows)):
            group = self.stale.pop(row, None)
            if group is not None:
                self.texts[row] = f"[{rank_set(group.ranks)}] {group.text()}"
