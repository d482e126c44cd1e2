"""Provides what both parts of the teardown benchmark share: retries, tables, verdicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.common.report import Report, Table, fmt_s, ratio, verdict
from bench.common.stats import median

HOSTS = ["node1", "node2"]
TARGET_S = 5.0
ORPHAN_WAIT_S = 10.0
RETRIES = 3
Sample = dict[str, Any]


class LaunchFailed(RuntimeError):
    """The job ended before every rank ran: not a teardown to measure; the run is redone."""


def retried(run: Callable[[int], Sample], failures: list[str]) -> Callable[[int], Sample]:
    """A failed launch (torch/gloo can fail on this box) is noted and the run redone."""

    def again(i: int) -> Sample:
        for _ in range(RETRIES):
            try:
                return run(i)
            except LaunchFailed as exc:
                failures.append(str(exc))
                print(f"  launch failed, redone: {exc}", flush=True)
        return run(i)

    return again


def engine_table(report: Report, runs: dict[str, list[Sample]]) -> None:
    table = Table(["teardown", "runs", "clock", "median", "max", "orphans (total)"])
    for name, samples in runs.items():
        clocks = [
            c for c in ("reported clean", "verified clean", "console exited") if c in samples[0]
        ]
        for clock in clocks:
            values = [s[clock] for s in samples]
            table.add(
                name,
                len(samples),
                clock,
                fmt_s(median(values)),
                fmt_s(max(values)),
                sum(s["orphans"] for s in samples),
            )
    report.table(table)
    for name, samples in runs.items():
        if len(samples) == 1 and "reported per node" in samples[0]:
            nodes = "; ".join(f"{n}: {d}" for n, d in samples[0]["reported per node"].items())
            report.para(f"{name}: TeardownReports: {nodes}.")
    left = [o for samples in runs.values() for s in samples for o in s["orphan list"]]
    if left:
        report.para("Orphans: " + "; ".join(left[:20]))


def verdict_para(report: Report, ddptui: list[Sample], by_hand: list[Sample]) -> None:
    ours = [max(s["reported clean"], s["verified clean"]) for s in ddptui]
    theirs = [s["verified clean"] for s in by_hand]
    orphans = sum(s["orphans"] for s in [*ddptui, *by_hand])
    report.para(
        f"ddptui (proven clean: reported and verified) / by hand (verified clean), "
        f"medians: {ratio(median(ours), median(theirs))}. Target <= {TARGET_S:.0f} s "
        f"(ddptui's worst of {len(ours)} runs: {fmt_s(max(ours))}): "
        f"{verdict(max(ours) <= TARGET_S, f'{max(ours) - TARGET_S:+.2f} s')}; "
        f"orphans {orphans}: {verdict(orphans == 0)}."
    )


def failures_para(report: Report, failures: list[str]) -> None:
    report.para(
        f"{len(failures)} launch(es) redone"
        + (": " + "; ".join(f"`{f[:300]}`" for f in failures) if failures else ".")
    )
