"""The log flood with metrics on and off, interleaved: what reading the ranks' metrics costs.

Every flood line is a metric line (`loss=0.1234 lr=3.0e-04 tok/s=51234.5`), the worst case:
each rank's lines are read at most once every 50 ms, the rest pass the pre-filter only. For
each repetition, in this order: the core tier (`Monitor.feed` of 16 nodes' lines, CPU time)
off then on, and the app tier (the real console under Pilot, keys probed, session in its own
process) at each offered rate off then on (`bench/flood/log_flood.py --child`, a fresh
process each; `FLOOD_METRICS=0` turns the reading off through the job's `read_metrics`).
Targets: >= 300k lines/s ingested in the app, keys p99 < 100 ms, with metrics on.

`python -m bench.flood.metrics_flood --reps 2 --rates max 100k/s` (`--quick`: a fifth of
the lines) writes `bench/results/metrics_flood.md`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.common.report import Report, Table, arg_parser, command_line, fmt_ms, verdict
from bench.common.trees import ROOT
from bench.flood.core_tier import NODES
from bench.flood.log_flood import (
    CORE_LINES_PER_NODE,
    METRICS,
    NODES_APART,
    _child,
    _lines_per_node,
)
from bench.flood.rates import RATES, format_rate

MODES = ("off", "on")
TARGET_RATE, TARGET_KEY_P99 = 300_000, 0.100
CORE_TIER = "Monitor.feed"


def core_lines_per_cpu_s(lines_per_node: int) -> float:
    """Monitor.feed alone over 16 nodes' flood lines, in lines per CPU-second (this process;
    FLOOD_METRICS says whether it reads metrics)."""
    from bench.flood.core_tier import _core_tier
    from testbed.standins.flood_node import flood_lines

    nodes = [f"local{i}" for i in range(NODES)]
    data = {n: flood_lines(f"[ddptui:{i}:0]:", 0, lines_per_node) for i, n in enumerate(nodes)}
    longest = max(map(len, data.values()))
    chunks = [(n, data[n][o : o + (1 << 16)]) for o in range(0, longest, 1 << 16) for n in nodes]
    t0 = time.process_time()
    _core_tier(CORE_TIER, nodes, chunks)
    return lines_per_node * NODES / (time.process_time() - t0)


def _core(mode: str, lines_per_node: int) -> float:
    """The core tier in a fresh process, metrics `mode`."""
    env = {**os.environ, METRICS: "1" if mode == "on" else "0", "PYTHONPATH": str(ROOT)}
    code = (
        "from bench.flood.metrics_flood import core_lines_per_cpu_s as f; "
        f"print(f({lines_per_node}))"
    )
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        cwd=ROOT, env=env, timeout=1800, check=True)  # fmt: skip
    return float(cp.stdout.strip().splitlines()[-1])


def _run(mode: str, *args: str) -> dict[str, Any]:
    before = os.environ.get(METRICS)
    os.environ[METRICS] = "1" if mode == "on" else "0"
    try:
        return _child(*args)
    finally:
        if before is None:
            os.environ.pop(METRICS, None)
        else:
            os.environ[METRICS] = before


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rates", nargs="*", choices=list(RATES), default=["max", "100k/s"])
    parser.add_argument("--name", default="metrics_flood", help="the report's file name")
    parser.add_argument(
        "--nodes-apart",
        action="store_true",
        help="as log_flood's: each pseudo-node's processes at the lowest priority, standing "
        "for nodes that are other machines (they get the CPU the console leaves)",
    )
    args = parser.parse_args()
    if args.nodes_apart:
        os.environ[NODES_APART] = "1"  # the children's specs pass it to the nodes
    reps = args.reps  # --quick cuts the lines only: the off/on pairs are the point
    core_lines = CORE_LINES_PER_NODE // (5 if args.quick else 1)
    cores: dict[str, list[float]] = {m: [] for m in MODES}
    apps: dict[tuple[str, str], list[dict[str, Any]]] = {}
    loads: list[float] = []
    for rep in range(reps):
        for mode in MODES:
            cores[mode].append(_core(mode, core_lines))
            print(f"[{rep + 1}/{reps}] core, metrics {mode}: "
                  f"{format_rate(cores[mode][-1])} per CPU-second", flush=True)  # fmt: skip
        for name in args.rates:
            rate, seconds = RATES[name]
            lines = _lines_per_node(rate, seconds, args.quick)
            for mode in MODES:
                loads.append(os.getloadavg()[0])
                result = _run(mode, "ui", str(lines), str(rate))
                apps.setdefault((name, mode), []).append(result)
                print(f"[{rep + 1}/{reps}] app at {name}, metrics {mode}: ingested "
                      f"{result['ingested']:,} of {result['on_disk']:,} at "
                      f"{format_rate(result['ingest_per_s'])}, key p99 "
                      f"{fmt_ms(result['key_p99'])}", flush=True)  # fmt: skip
    report = Report(args.name, "Log flood with metrics on and off", command_line())
    report.para(
        f"{NODES} pseudo-nodes, every line a metric line; {reps} repetition(s), metrics off "
        f"and on interleaved; load average during the app runs: "
        f"{min(loads, default=0):.1f}..{max(loads, default=0):.1f} ({os.cpu_count()} cores)."
    )
    report.section("Core: Monitor.feed, lines per CPU-second (median)")
    core = Table(["metrics", "lines per CPU-s", "each run", "vs off"])
    for mode in MODES:
        each = ", ".join(format_rate(v) for v in cores[mode])
        core.add(mode, format_rate(_med(cores[mode])), each,
                 f"{_med(cores[mode]) / _med(cores['off']):.2f}x")  # fmt: skip
    report.table(core)
    if not args.rates:
        report.write()
        return
    report.section("The app: ingest and keys (median of the repetitions)")
    table = Table(["offered", "metrics", "ingested/s", "lost", "key p50", "key p99",
                   "RSS MB", "target"])  # fmt: skip
    for name in args.rates:
        for mode in MODES:
            runs = apps[(name, mode)]
            rate = _med([r["ingest_per_s"] for r in runs])
            p99 = _med([r["key_p99"] for r in runs])
            lost = sum(r["on_disk"] - r["ingested"] for r in runs)
            ok = p99 < TARGET_KEY_P99 and (RATES[name][0] != 0 or rate >= TARGET_RATE)
            table.add(name, mode, format_rate(rate), lost,
                      fmt_ms(_med([r["key_p50"] for r in runs])), fmt_ms(p99),
                      f"{_med([r['rss_mb'] for r in runs]):.0f}", verdict(ok))  # fmt: skip
    report.table(table)
    report.para(
        "Targets: >= 300k lines/s ingested at `max` and keys p99 < 100 ms at every rate, with "
        "metrics on. On this shared machine absolute rates move several-fold between runs; "
        "the off/on pairs ran back to back, so their ratio is the figure to read."
    )
    report.write()


if __name__ == "__main__":
    main()
