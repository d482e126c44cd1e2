"""Provides the output of `ddptui history` and `ddptui preflight`: text tables or JSON lines."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import signal
import sqlite3
import sys
from collections.abc import Sequence
from typing import TextIO

from ddptui.cli.text_table import Column, clip, fit_table
from ddptui.core.events import Event, Notice, plain_number
from ddptui.core.job.spec import JobSpec, SpecError
from ddptui.core.preflight.preflight import (
    CHECKS,
    CheckResult,
    Preflight,
    PreflightSummary,
    cell_status,
)
from ddptui.core.runs.compare import compare, goodput_figures, run_metrics
from ddptui.core.runs.history import RunHistory
from ddptui.core.runs.history_rows import attempt_lines, history_row
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.settle import settle_detached

MARK = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "-"}
# What gives way at 80 columns: the backend first (WHERE says it), then the profile, the
# duration, the hosts, the goodput; the run id (typed again to attach), the outcome, its
# attempts, the ranks and what happened (the story's lead) are never cut.
HISTORY_TABLE = (
    Column("RUN"),
    Column("STARTED"),
    Column("TIME", drop=3),
    Column("PROFILE", min_width=10, drop=2),
    Column("BACKEND", drop=1),
    Column("WHERE", min_width=13, drop=4),
    Column("OUTCOME"),
    Column("ATTEMPTS", "ATT"),
    Column("GOODPUT", "GOOD", drop=5),
    Column("RANKS", min_width=16),
    Column("WHAT HAPPENED", min_width=18),
)
# The preflight grid's checks by shorter names where a terminal is narrow.
CHECK_SHORT = {
    "reachable": "reach",
    "python": "py",
    "settings": "set",
    "rdzv-port": "port",
    "hostname": "host",
}


def print_history(
    limit: int | None,
    as_json: bool,
    out: TextIO | None = None,
    width: int | None = None,
    refresh: bool = False,
) -> int:
    """The runs, newest first, one line each in `width` characters (None: full width).

    Runs on this machine left detached are brought up to date first (their run directory
    has what they need); `refresh`: those on SSH or Slurm nodes too, asked through their
    backend (a few seconds per run)."""
    out = out or sys.stdout
    history = RunHistory()
    try:
        said = settle_detached(history)
        if refresh:
            from ddptui.cli.catch_up import ask_detached

            said.update(ask_detached(history))
        records = history.listing(limit)
    except sqlite3.DatabaseError as exc:
        raise SpecError(
            f"history database {history.path} cannot be read ({exc}): move it aside and "
            "ddptui starts a new one (run directories are kept)"
        ) from None
    if as_json:
        for record in records:
            out.write(json.dumps(record.to_dict()) + "\n")
        return 0
    if not records:
        out.write("no runs yet\n")
        return 0
    short = width is not None
    lines = fit_table(HISTORY_TABLE, [history_row(r, short) for r in records], width)
    out.write("\n".join(lines) + "\n")
    for record in (r for r in records if len(r.attempts) > 1):
        out.write(f"{record.id}: {len(record.attempts)} attempts\n")
        for line in attempt_lines(record, short):
            out.write("  " + (clip(line, width - 2) if width else line) + "\n")
    notes = [
        f"{r.id}: still detached, {said[r.id]}"
        for r in records
        if r.id in said and r.status == "detached"
    ]
    away = sum(r.status == "detached" and r.backend != "local" for r in records)
    if away and not refresh:
        notes.append(
            f"{away} run(s) left detached on remote nodes: `ddptui history --refresh` asks them"
        )
    count = f"{len(records)} run(s); run directories: `ddptui history --json` lists them"
    for line in [*notes, count]:
        out.write((clip(line, width) if width else line) + "\n")
    return 0


def preflight_text(
    results: Sequence[CheckResult], summary: PreflightSummary, width: int | None = None
) -> list[str]:
    """The grid (nodes x checks) in `width` characters (None: full), and every failure and
    warning with its fix."""
    nodes = list(dict.fromkeys([*summary.nodes, *(r.node for r in results)]))
    rows = [
        [node, *(MARK[cell_status(list(results), node, check)] for check in CHECKS)]
        for node in nodes
    ]
    columns = [Column("NODE", min_width=12), *(Column(c, CHECK_SHORT.get(c, "")) for c in CHECKS)]
    lines = fit_table(columns, rows, width)
    problems = [r for r in results if r.status in ("fail", "warn")]
    if problems:
        lines.append("")
    for result in problems:
        lines.append(f"{MARK[result.status]} {result.node} {result.check}: {result.detail}")
        if result.fix:
            lines.append(f"    fix: {result.fix}")
    verdict = "ready" if summary.ok else "NOT ready"
    lines += ["", f"{verdict}: {summary.detail}"]
    return lines


def run_preflight(
    spec: JobSpec,
    headless: bool,
    out: TextIO | None = None,
    *,
    gang: bool = True,
    min_busbw: float = 0.0,
    width: int | None = None,
) -> int:
    """Check every node of the job, then the gang test; exit 0 only if no check failed."""
    from ddptui.core.preflight.gang_runner import run_gang

    stream = out or sys.stdout
    results: list[CheckResult] = []

    def emit(event: Event) -> None:
        if isinstance(event, CheckResult):
            results.append(event)
        if headless:
            stream.write(event.to_json() + "\n")
            stream.flush()
        elif isinstance(event, Notice):
            stream.write(f"... {event.message}\n")
        elif not isinstance(event, CheckResult | PreflightSummary):
            stream.write(f"... {getattr(event, 'state', '')} {getattr(event, 'detail', '')}\n")
            stream.flush()

    async def main() -> PreflightSummary:
        runner = functools.partial(run_gang, notify=emit) if gang else None
        preflight = Preflight(spec, emit, gang=runner, gang_min_busbw=min_busbw)
        task = asyncio.ensure_future(preflight.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        return await task

    if not headless:
        stream.write(f"preflight: {spec.nodes} node(s) from {spec.backend} ...\n")
        stream.flush()
    try:
        summary = asyncio.run(main())
    except asyncio.CancelledError:
        stream.write("preflight cancelled\n")
        return 130
    if not headless:
        stream.write("\n".join(preflight_text(results, summary, width)) + "\n")
    return 0 if summary.ok else 1


def print_stacks(run: RunDir, method: str | None, as_json: bool) -> int:
    """`ddptui stacks RUN_ID`: the groups (suspects first), then each rank's whole stack."""
    from ddptui.core.diagnose.stall_events import StacksReport

    events = asyncio.run(stacks_of_run(run, method))
    report = next(e for e in events if isinstance(e, StacksReport))
    if as_json:
        print(report.to_json())
        return 0 if report.groups else 1
    print(f"run {run.run_id}: stacks by {report.method}")
    if report.deadlock:
        print("deadlock: the groups wait on each other in different collectives")
    for group in report.groups:
        mark = ("deadlock" if report.deadlock else "suspect") if group.suspect else ""
        count = f"{len(group.ranks)} rank{'s' if len(group.ranks) > 1 else ''}"
        where = f" · in {group.collective}" if group.collective else ""
        print(f"{mark:<7} {count:>9}: {group.label}{where}  (ranks {_ranks(group.ranks)})")
    for line in report.collectives:
        print(f"flight recorder: {line}")
    for problem in report.problems:
        print(f"not taken: {problem}")
    for rank, node, local_rank, text in report.ranks:
        print(f"\n== rank {rank} ({node} local rank {local_rank})\n{text}")
    return 0 if report.groups else 1


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks[:16])) + (
        f" ... (+{len(ranks) - 16})" if len(ranks) > 16 else ""
    )


async def stacks_of_run(run: RunDir, method: str | None = None) -> list[Event]:
    """`ddptui stacks RUN_ID`: every rank's stacks of a run that is still running (followed
    by a console, detached, or under sbatch), through its backend; the job is left as it is."""
    spec = run.read_spec()
    if method:
        spec = spec.model_copy(update={"stacks_method": method})
    plan, state = run.read_plan()
    from ddptui.core.backends.factory import make_backend
    from ddptui.core.diagnose.job_watch import JobWatch
    from ddptui.core.session.collector import gather_stacks

    backend = make_backend(spec, run, lambda event: None)
    await backend.restore(state)
    try:
        reports = await gather_stacks(backend, plan.commands)
    finally:
        await backend.detach()
    return JobWatch(plan.node_names, plan.nproc_per_node).stacks_taken(reports)


def print_compare(run_a: str, run_b: str, as_json: bool, out: TextIO | None = None) -> int:
    """Two runs' metrics and goodput side by side (`ddptui history --compare A B`): each
    figure, the change from A to B, and which is better by the metric's goal (marked `*`)."""
    out = out or sys.stdout
    history = RunHistory()
    records = []
    for run_id in (run_a, run_b):
        record = history.get(run_id)
        if record is None:
            raise SpecError(f"no run {run_id!r} in the history (`ddptui history` lists them)")
        records.append(record)
    a, b = ({**run_metrics(r), **goodput_figures(r)} for r in records)
    rows = compare(a, b)
    if as_json:
        for row in rows:
            data = {
                "figure": row.figure,
                "a": _number(row.a),
                "b": _number(row.b),
                "change": row.change,
                "better": row.better,
            }
            out.write(json.dumps(data) + "\n")
        return 0
    if not rows:
        out.write(f"neither {run_a} nor {run_b} has metrics or a goodput to compare\n")
        return 0
    table = [
        [
            row.figure,
            _figure(row.a) + (" *" if row.better == "a" else ""),
            _figure(row.b) + (" *" if row.better == "b" else ""),
            f"{row.change:+.1%}" if row.change is not None else "-",
        ]
        for row in rows
    ]
    columns = (Column("METRIC"), Column(run_a), Column(run_b), Column("CHANGE"))
    out.write("\n".join(fit_table(columns, table, None)) + "\n")
    out.write(
        "* the better of the two (lower loss, higher accuracy, throughput and goodput, "
        "less time lost)\n"
    )
    return 0


def _number(value: float | None) -> float | str | None:
    return None if value is None else plain_number(value)


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(plain_number(value))
    return f"{value:.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
