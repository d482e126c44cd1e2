"""Provides the log flood's offered rates, its lag sampling and how its figures and report are
named: what the runner (log_flood.py) and the report (report.py) both read."""

from __future__ import annotations

from typing import Any

# offered rate (all nodes together, lines/s; 0 = as fast as they can) and seconds of flood
RATES = {
    "quiet (320/s)": (320, 40.0),
    "10k/s": (10_000, 20.0),
    "100k/s": (100_000, 6.0),
    "1M/s": (1_000_000, 3.0),
    "max": (0, 0.0),
}
LAG_SAMPLE = 1024  # parse the write time of one line in this many
LAG_WARMUP_S = 2.0  # lines already waiting when the console starts following don't count
BASE = " (base)"  # a tier of the baseline tree


def report_name(data: dict[str, Any]) -> str:
    """log_flood, or log_flood_nodes_apart for a run with `--nodes-apart`, unless the raw
    results name their report (a sweep kept under a name of its own)."""
    if data.get("name"):
        return str(data["name"])
    return "log_flood_nodes_apart" if data.get("nodes_apart") else "log_flood"


def format_rate(v: float) -> str:
    """Lines per second as a report writes them (thousands above 10k)."""
    if v != v:
        return "n/a"
    return f"{v / 1000:,.0f}k/s" if v >= 10_000 else f"{v:,.0f}/s"
