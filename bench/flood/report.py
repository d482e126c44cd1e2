"""Provides the log flood's report: tables and targets from the raw results of
bench/flood/log_flood.py, which it is handed (it imports nothing of the runner).

Kept apart so a report can be redone from bench/results/log_flood.json without a new run.
"""

from __future__ import annotations

from typing import Any

from bench.common.report import Report, Table, fmt_ms, verdict
from bench.common.stats import median
from bench.flood.core_tier import CORE_TIERS, NODES
from bench.flood.rates import BASE, LAG_SAMPLE, LAG_WARMUP_S, RATES, format_rate, report_name


def render(data: dict[str, Any], command: str, doc: str | None) -> None:
    """The report from the raw results (`--render bench/results/log_flood.json` redoes it);
    `doc` is the runner's docstring, whose body opens the report."""
    reps, core_lines, cores = data["reps"], data["core_lines"], data["cores"]
    command = data.get("command", command)  # how the run was made, not how it was redrawn
    name = report_name(data)
    apart = ", nodes apart" if data.get("nodes_apart") else ""
    report = Report(name, f"Log ingest under flood (16 pseudo-nodes{apart})", command)
    report.env = data.get("env", report.env)  # the machine as it was during the run
    report.para((doc or "").split("\n\n", 1)[1].strip())
    report.para(
        f"Each figure is the median of {reps} run(s); the sweep is repeated as a whole "
        f"(rates and tiers alternate within a sweep). Raw results: bench/results/{name}.json."
    )
    if data.get("baseline"):
        report.para(f"Baseline (measured interleaved with this tree): {data['baseline']}.")
    if data.get("nodes_apart"):
        report.para(
            "Nodes apart (`--nodes-apart`): each pseudo-node's writer and node helper ran in a "
            "scheduling group of the lowest priority (autogroup nice 19), standing for nodes "
            "that are other machines: they got the CPU the console left. Without it, the "
            "console shares the 2 cores with the 16 nodes' 32 processes as equals."
        )
    if data.get("loads"):
        loads = data["loads"]
        nproc = data.get("env", {}).get("nproc", "?")
        report.para(
            f"1-minute load average at the start of each run: median {median(loads):.1f}, "
            f"{min(loads):.1f} to {max(loads):.1f} ({nproc} cores, maybe shared)."
        )
    report.section("Core alone (in memory, no processes)")
    table = Table(
        ["pipeline", "lines per CPU-second", "vs Monitor.feed", "baseline", "this vs baseline"]
    )
    base = median([c["Monitor.feed"]["lines_per_s"] for c in cores])
    olds = data.get("cores_base") or []
    for tier in [t for t in CORE_TIERS if t in cores[0]]:  # older results lack new tiers
        rate = median([c[tier]["lines_per_s"] for c in cores])
        old = median([c[tier]["lines_per_s"] for c in olds if tier in c]) if olds else None
        table.add(
            tier,
            format_rate(rate),
            f"{rate / base:.2f}x",
            format_rate(old) if old else "-",
            f"{rate / old:.2f}x" if old else "-",
        )
    report.table(table)
    report.para(
        f"{core_lines * NODES:,} lines of ~90 bytes, fed in 64 KiB chunks, 16 nodes round-robin."
    )
    if "fold" in cores[0]:
        folds = [c["fold"] for c in cores]
        cost = median([f["fold_extra_s"] / (f["ingest_s"] + f["rows_s"]) for f in folds])
        per_line = median([f["fold_extra_s"] / f["lines"] * 1e6 for f in folds])
        report.para(
            f"Folding the merged view's repeated lines (`z`) adds {per_line:.2f} us a line, "
            f"{cost:.1%} of the ingest (Monitor.feed, the relay and the merged view's rows) "
            f"(target < 10%: {verdict(cost < 0.10, f'{cost:.1%}')}). Measured on the lines the "
            "relay hands the screen, the view's work five times with and five without "
            "folding, alternating, the fastest of each."
        )
    sweeps = data["sweeps"]
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for key in sweeps[0]:
        tier, name = key.split("|", 1)
        runs[(tier, name)] = _median_result([s[key] for s in sweeps])
    _tables(report, runs, sweeps)
    report.write()


def _median_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per field, the median over repetitions (nested dicts too; other values from the first)."""
    out: dict[str, Any] = {}
    for key, value in results[0].items():
        if isinstance(value, dict):
            out[key] = _median_result([r[key] for r in results])
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = median([r[key] for r in results])
        else:
            out[key] = value
    return out


def _tables(
    report: Report, runs: dict[tuple[str, str], dict[str, Any]], sweeps: list[dict[str, Any]]
) -> None:
    report.section("Real pipeline: node helper, tail, pipes, Session (headless) and the app (ui)")
    table = Table(
        [
            "offered",
            "tier",
            "lines written",
            "ingested",
            "lost",
            "ingest rate (first to last)",
            "lag p50 / p99",
            "shown / skipped on screen",
            "frame p50 / p99",
            "console CPU a line",
            "peak RSS",
        ]
    )
    for (tier, name), r in runs.items():
        is_ui = tier.startswith("ui")
        table.add(
            name,
            tier,
            f"{r['on_disk']:,.0f}",
            f"{r['ingested']:,.0f}",
            f"{r['on_disk'] - r['ingested']:,.0f}",
            format_rate(r["ingest_per_s"]),
            f"{r['lag_p50']:.2f} / {r['lag_p99']:.2f} s",
            f"{r['lines']:,.0f} / {r['skipped']:,.0f}" if is_ui else "-",
            f"{fmt_ms(r['frame_p50'])} / {fmt_ms(r['frame_p99'])}" if is_ui else "-",
            _cpu_per_line(r),
            f"{r['rss_mb']:.0f} MB",
        )
    report.table(table)
    report.para(
        "Lag: how long after a node wrote a line the console ingested it (one line in "
        f"{LAG_SAMPLE} sampled, after the first {LAG_WARMUP_S:.0f} s). A lag of seconds "
        "means the console fell behind the offered rate and caught up from the nodes' "
        "log files afterwards (nothing is lost: the node helper tails the file). At a "
        "fixed rate the ingest rate cannot exceed the offered one; at `max` it is the "
        "console's throughput."
    )
    report.section("Key-to-screen latency in the app (Pilot), quiet vs flood")
    keys = Table(
        ["offered", "tree", "key", "presses", "never shown (5 s)", "p50", "p99", "p50 vs quiet"]
    )
    for (tier, name), r in runs.items():
        if not tier.startswith("ui"):
            continue
        quiet = runs.get((tier, next(iter(RATES))), {}).get("keys", {})
        for key, k in r["keys"].items():
            base = quiet.get(key, {}).get("p50", float("nan"))
            keys.add(
                name,
                tier.removeprefix("ui").strip(" ()") or "this",
                key,
                f"{k['n']:.0f}",
                f"{k['lost']:.0f}",
                fmt_ms(k["p50"]),
                fmt_ms(k["p99"]),
                f"{k['p50'] / base:.2f}x" if base == base and k["p50"] == k["p50"] else "n/a",
            )
    report.table(keys)
    report.para(
        "p50/p99 are over the presses that reached the screen; a press whose effect "
        "was not on screen 5 s later counts as never shown."
    )
    _versus_base(report, runs, sweeps)
    ui = [r for (t, _), r in runs.items() if t == "ui"]
    worst_p99 = max(r["key_p99"] for r in ui)
    lost_keys = sum(r["key_lost"] for r in ui)
    quiet_run = runs.get(("ui", next(iter(RATES))))
    quiet_p99 = quiet_run["key_p99"] if quiet_run else float("nan")
    worst_rss = max(r["rss_mb"] for (t, _), r in runs.items() if not t.endswith(BASE))
    lost = sum(r["on_disk"] - r["ingested"] for r in runs.values())
    rate = runs[("ui", "max")]["ingest_per_s"]
    headless = runs[("headless", "max")]["ingest_per_s"]
    report.section("Targets (this tree)")
    targets = Table(["target", "measured", "verdict"])
    targets.add(
        f">= {TARGET_RATE // 1000}k lines/s (ui, as fast as they can)",
        f"{format_rate(rate)} (headless {format_rate(headless)})",
        verdict(rate >= TARGET_RATE, f"{rate / TARGET_RATE - 1:+.0%}"),
    )
    targets.add(
        "key p99 < 100 ms (worst offered rate)",
        f"{fmt_ms(worst_p99)}; {lost_keys:.0f} press(es) never shown",
        verdict(
            worst_p99 < 0.1 and not lost_keys,
            f"{worst_p99 / 0.1:.1f}x the target; quiet app: {fmt_ms(quiet_p99)}",
        ),
    )
    targets.add(
        "peak RSS < 300 MB (console process)",
        f"{worst_rss:.0f} MB",
        verdict(worst_rss < 300, f"{worst_rss / 300 - 1:+.0%}"),
    )
    targets.add("0 lines lost", f"{lost:,.0f}", verdict(lost == 0))
    report.table(targets)
    report.para(LIMITS)


TARGET_RATE = 300_000


def _cpu_per_line(r: dict[str, Any]) -> str:
    """The console process's CPU time (all threads) over the lines it ingested."""
    if "cpu_s" not in r or not r["ingested"]:
        return "n/a"
    return f"{r['cpu_s'] / r['ingested'] * 1e6:.1f} us"


def _spread(sweeps: list[dict[str, Any]], key: str, field: str, scale: float = 1.0) -> str:
    """`min-max` of a field over the repetitions, when there are several."""
    values = [s[key][field] * scale for s in sweeps if key in s]
    if len(values) < 2:
        return ""
    return f" ({min(values):,.3g}-{max(values):,.3g})"


def _versus_base(
    report: Report, runs: dict[tuple[str, str], dict[str, Any]], sweeps: list[dict[str, Any]]
) -> None:
    """This tree against the baseline, run for run in the same sweep: ratios, not rates.

    Medians over the repetitions, their range in brackets (rates in k lines/s, p99 in ms)."""
    pairs = [(t, n) for (t, n) in runs if (t + BASE, n) in runs]
    if not pairs:
        return
    report.section("This tree vs the baseline (same sweep, interleaved)")
    table = Table(
        ["offered", "tier", "ingest rate base -> this", "ratio", "CPU a line base -> this",
         "key p99 base -> this", "keys never shown base -> this", "peak RSS base -> this"]
    )  # fmt: skip
    for tier, name in pairs:
        new, old = runs[(tier, name)], runs[(tier + BASE, name)]
        is_ui = tier.startswith("ui")
        k_new, k_old = f"{tier}|{name}", f"{tier}{BASE}|{name}"
        rates = [
            s[k_new]["ingest_per_s"] / s[k_old]["ingest_per_s"]
            for s in sweeps
            if s[k_old]["ingest_per_s"]  # a baseline run that ingested nothing has no ratio
        ] or [float("nan")]
        table.add(
            name,
            tier,
            f"{format_rate(old['ingest_per_s'])}{_spread(sweeps, k_old, 'ingest_per_s', 1e-3)} -> "
            f"{format_rate(new['ingest_per_s'])}{_spread(sweeps, k_new, 'ingest_per_s', 1e-3)}",
            f"{median(rates):.2f}x ({min(rates):.2f}-{max(rates):.2f})",
            f"{_cpu_per_line(old)} -> {_cpu_per_line(new)}",
            f"{fmt_ms(old['key_p99'])}{_spread(sweeps, k_old, 'key_p99', 1e3)} -> "
            f"{fmt_ms(new['key_p99'])}{_spread(sweeps, k_new, 'key_p99', 1e3)}"
            if is_ui
            else "-",
            f"{old['key_lost']:.0f} -> {new['key_lost']:.0f}" if is_ui else "-",
            f"{old['rss_mb']:.0f} -> {new['rss_mb']:.0f} MB",
        )
    report.table(table)


LIMITS = """Where the time goes. Before the session moved to a process of its own it ran on a
thread in the app's process: the ingest and the screen shared one interpreter (together at
most one core; the screen's thread got its turn every 1 ms at best, and a full collection
stopped both), and keys' p99 stayed at 0.6-1.2 s. Now the session runs in a process of its
own (ddptui/core/session/process.py, session_child.py), in a session (so a scheduling group)
of its own: it reads every node's output, writes every line to the run directory, and hands
the app, over a pipe, every event in order and of the lines at most 10,000 a second (bursts
of up to 8,000 at once; the rest counted as skipped). The app's process only draws.

py-spy of both processes (`py-spy record --subprocesses`, 16 x 150,000 lines): in the
session's process Monitor.feed is most of the work (the progress search ~12%, attribution
~7%, failure clues ~5%), the rest waits on pipes; in the app's process drawing is ~43% of its
event loop (Textual's compositor; the log view's rows ~13%), the log views' append ~14%,
layout ~8%, the reader thread's unpickling ~2%.

Keys. The app's slowest stops were first full collections of its stored lines (15 of up to
174 ms in one flood run at Python's default threshold; the app now raises the young threshold
while a session runs: 2). What is left is drawing: timed in the app during a flood with the
nodes apart (load 5), a screen update took p50 20 ms, p90 42 ms, p99 84 ms, at most 184 ms;
the log flush p50 3.5 ms, p99 28 ms. The app also kept Python's default collector
thresholds once a run was over: with its ~150,000 tracked objects (the views' lines,
Textual's strips and their caches) a full collection of ~100 ms came every few tab switches
even with no job running (14 in 51 switches); the app now keeps the young threshold raised
for as long as it runs, and the same 51 switches at rest took at most 66 ms (was 183 ms).
The session process cut the keys' p99 on a loaded machine (log_flood_loaded.md, load 9-212)
from 525 to 318 ms at max and from 876 to 528 ms at 100k/s.

Drawing. Four costs of the log views came out, each found by timing the app's
screen updates during a flood and each with a test (tests/ui/test_log_keys_latency.py):
(1) a log view that grew set Textual's `virtual_size`, which lays out the whole screen, so
every tick of a flood reflowed every widget (layouts in one 16-node flood run: 107 -> 71,
the rest tab switches); the view now sets it and updates its own scrollbars. (2) A hidden
view that got lines asked for a repaint; a widget that is not on screen makes Textual arrange
every widget again, so with 16 hidden views every tick did (at 64 nodes on a loaded
machine, a tick with nothing else to draw took 40-100 ms); hidden views now repaint nothing
until shown. (3) The log view asked Textual for its style once per row drawn, which walks
every ancestor's styles (54% of the view's drawing); now once per drawing (a 64-node
tick's repaint: 73 -> 31 ms of CPU under cProfile). (4) A node's new state mark relabelled
its tab through `Tab.label`, which lays out the screen; a mark as wide as the one before is
now only redrawn.

The tab switch's tail. Until the log deck's tabs changed, `]` had p50 38-42 ms and p99
144-343 ms in plain sweeps (81-186 ms with the nodes apart), while scroll and follow stayed
at p99 35-51 ms. The slow presses were the first ones of a flood: in that first second the
session's first burst (up to 8,000 lines at once), the launch's node and rank updates and the
sixteen writers all land together. Timed in the app, a switch was about 24 ms of layout, most
of it the full redraw that follows every layout; the deck was Textual's TabbedContent, a Tab
widget per log in a row that every switch laid out again, and whose `_watch_active` queried
the tabs twice. The deck now has one tab bar widget that draws only the tabs in sight
(ddptui/ui/widgets/logs/log_tabs.py) and a ContentSwitcher of the log views: a switch hides
one view and shows another, with no tab widgets to lay out (idle `]`: 17-31 -> 11-21 ms at
16 nodes, 39-165 -> 15-20 ms at 512). With the nodes apart, interleaved with the previous
deck (log_flood_nodes_apart.md): `]` p99 130 -> 74 ms at 100k/s and 105 -> 49 ms at max.

The session's weight. The session process is a session of its own, so (with Linux's
autogroups) a scheduling group of the console's weight; in a flood's first seconds both want
a whole core. It now sets its group to nice 5 (a third of the console's weight when they meet
on one core; ddptui/core/session/child.py). Interleaved with the same tree without that
(log_flood_session_weight.md, nodes apart, 3 sweeps): `]` p99 199 -> 124 ms at 100k/s and
136 -> 129 ms at max, ingest unchanged (99k/s; 404k -> 414k/s at max).

Measuring. The scroll key's effect used to be "the view is above where it was before the
press"; lines arriving between the reading and the press moved the end further down, so at
a job's end a press that showed could count as never shown (seen in 3 of 6 runs of the
older tree, 1 of 10 of this one, in a timing script); it is now "the view has stopped
following and sits above its end"."""
