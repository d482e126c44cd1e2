"""Provides read_node_log: a node's log file read back as the console showed it live."""

from __future__ import annotations

from pathlib import Path

from ddptui.core.monitor.framing import LineFramer, RankAttributor

MAX_LINES = 20_000
TAIL_BYTES = 8 << 20


def read_node_log(path: Path, limit: int = MAX_LINES) -> list[str]:
    """The newest `limit` lines of a node's log: `[r3] text` for a rank's lines, agent lines
    as they are. Only the last `TAIL_BYTES` are read; the first line then says what was left."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read()
    except OSError as exc:
        return [f"(no log: {exc.strerror})"]
    framer, ranks = LineFramer(), RankAttributor()
    lines: list[str] = []
    for line in [*framer.feed(data), *framer.flush()]:
        lines += [
            f"[r{a.rank}] {a.text}" if a.rank is not None else a.text for a in ranks.feed(line)
        ]
    lines += [f"[r{a.rank}] {a.text}" for a in ranks.flush()]
    if size > TAIL_BYTES and lines:
        lines[0] = f"… (first {size - TAIL_BYTES} bytes not shown: see {path})"
    return lines[-limit:]
