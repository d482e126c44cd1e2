"""Provides the preemption drill: the job's stop signal to every rank on every node, each
rank's exit timed against the grace (and Slurm's `--signal` lead time), as a table kept with
the run.

A drill rehearses what a preemption does to the job: every worker gets the job's stop signal
(`--stop-signal`, SIGTERM by default) at once, as the teardown sends it, and has the grace
(`--grace`) to save what it must and exit; what is still there then gets SIGKILL. The nodes
time each rank (node/drill.py); the agents' own word on each rank's exit code is waited for,
then the drill ends the run, and the teardown proves every node clean as it always does.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptui.core.backends.base import Backend, BackendError
from ddptui.core.backends.slurm.commands import slurm_signal_name
from ddptui.core.events import Event, RankSummary, plain
from ddptui.core.job.plan import NodeCommand
from ddptui.core.job.spec import JobSpec

DRILL_WORD = "drill"  # the control file's line that asks for one (headless mode)
DRILL_FILE = "drill.json"  # in the run directory: the drill's report, as its event has it
SETTLE_S = 20.0  # how long the agents get to end and say their ranks' exit codes
SYNC_S = 2.0  # the signal goes this long after the drill is asked, at once on every node
SLURM_LEAD_DEFAULT_S = 60.0  # Slurm's --signal without @TIME warns this long ahead


@dataclass(frozen=True)
class DrillAsked:
    """The operator asked for a preemption drill (the console's key, confirmed, or the
    headless control file's `drill` line)."""


@dataclass(frozen=True)
class RankExit:
    """One rank's end in a drill: when its node sent the stop signal (that node's clock), how
    long it took to exit (None: it had not by the grace, and got SIGKILL), its exit code (-N:
    ended by signal N; None: not known). `found` False: the rank had ended before the signal
    (its agent's word says how), so its node timed nothing."""

    node: str
    rank: int | None
    local_rank: int | None
    pid: int
    sent_at: float
    after_s: float | None
    killed: bool
    exit_code: int | None
    found: bool = True

    @property
    def outcome(self) -> str:
        if not self.found:
            return "gone before it"
        return "needed SIGKILL" if self.killed else "within grace"


@dataclass(frozen=True)
class DrillReport(Event):
    """A preemption drill's outcome: `{"event": "drill", "signals", "grace_s", "lead_s",
    "ranks": [{"node", "rank", "local_rank", "pid", "sent_at", "after_s", "killed",
    "exit_code", "outcome"}], "problems", "headline"}`. `lead_s` is Slurm's warning ahead of
    the end (`--slurm-signal ...@TIME`), None without one; `problems` names the nodes that
    could not be drilled, and why."""

    signals: tuple[str, ...]
    grace_s: float
    lead_s: float | None
    ranks: tuple[RankExit, ...]
    problems: tuple[str, ...] = ()

    kind = "drill"
    followed = True  # a console following the run (`ddptui serve`, `--read-only`) shows it too

    @property
    def killed(self) -> tuple[RankExit, ...]:
        return tuple(r for r in self.ranks if r.killed)

    @property
    def gone(self) -> tuple[RankExit, ...]:
        """Ranks that had ended before the signal reached their node."""
        return tuple(r for r in self.ranks if not r.found)

    @property
    def past_lead(self) -> tuple[RankExit, ...]:
        """Ranks that exited within the grace but after Slurm's warning's lead time: a real
        preemption would have killed them."""
        lead = self.lead_s
        if lead is None:
            return ()
        return tuple(r for r in self.ranks if r.after_s is not None and r.after_s > lead)

    @property
    def headline(self) -> str:
        """The drill in one line: how many ranks made it, who did not."""
        signals = "+".join(f"SIG{s}" for s in self.signals)
        total = len(self.ranks)
        within = total - len(self.killed) - len(self.gone)
        line = f"preemption drill ({signals}): {within} of {total} rank(s) exited within the "
        line += f"{self.grace_s:g} s grace"
        if self.killed:
            line += f"; {len(self.killed)} needed SIGKILL ({_who(self.killed)})"
        else:
            slowest = max(
                (r for r in self.ranks if r.after_s is not None),
                key=lambda r: r.after_s or 0.0,
                default=None,
            )
            if slowest is not None:
                line += f"; the slowest, {_who((slowest,))}, after {slowest.after_s:.2f} s"
        if self.gone:
            line += f"; {len(self.gone)} had ended before the signal ({_who(self.gone)})"
        if self.past_lead:
            line += f"; past Slurm's {self.lead_s:g} s warning: {_who(self.past_lead)}"
        if self.problems:
            line += f"; not drilled: {'; '.join(self.problems)}"
        return line

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["ranks"] = [{**plain(r), "outcome": r.outcome} for r in self.ranks]
        data["headline"] = self.headline
        return data


def _who(ranks: Sequence[RankExit]) -> str:
    shown = [f"rank {r.rank if r.rank is not None else '?'} on {r.node}" for r in ranks[:3]]
    return ", ".join(shown) + (f" and {len(ranks) - 3} more" if len(ranks) > 3 else "")


def slurm_lead_s(spec: JobSpec) -> float | None:
    """How long ahead of the end Slurm's warning comes (`--slurm-signal [B:]SIG[@TIME]`), None
    without one (or off Slurm)."""
    if spec.backend != "slurm" or not spec.slurm.signal or slurm_signal_name(spec) is None:
        return None
    _, at, seconds = spec.slurm.signal.partition("@")
    if not at:
        return SLURM_LEAD_DEFAULT_S
    try:
        return float(seconds)
    except ValueError:
        return None


def exit_text(code: int | None) -> str:
    """An exit code as an operator reads it: `0`, `-10 SIGUSR1`, `?`."""
    if code is None:
        return "?"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"{code} {signal.Signals(-code).name}"
    return str(code)


def drill_table(report: DrillReport, width: int = 78) -> list[str]:
    """The drill as a text table, one row a rank, in `width` columns (the console's 80, the
    run directory's file): node (its first 12 characters), rank, local rank, when the signal
    was sent (the node's clock), how long the rank took to exit, within the grace or
    SIGKILL, its exit code."""
    node_w = max(4, min(12, max((len(r.node) for r in report.ranks), default=4)))
    lead = f" · Slurm warns {report.lead_s:g} s ahead" if report.lead_s is not None else ""
    signals = "+".join(f"SIG{s}" for s in report.signals)
    nodes = len({r.node for r in report.ranks})
    lines = [
        f"{signals} to {len(report.ranks)} rank(s) on {nodes} node(s) · "
        f"grace {report.grace_s:g} s{lead}"[:width],
        "",
        f"{'node':<{node_w}} {'rank':>4} {'local':>5}  {'signal sent':<12} "
        f"{'exited in':>9}  {'outcome':<14}  exit"[:width],
    ]
    for r in report.ranks:
        sent = (
            time.strftime("%H:%M:%S", time.localtime(r.sent_at))
            + f".{int(r.sent_at % 1 * 1000):03d}"
        )
        after = f"{r.after_s:.2f} s" if r.after_s is not None else "—"
        rank = str(r.rank) if r.rank is not None else "?"
        local = str(r.local_rank) if r.local_rank is not None else "?"
        outcome = r.outcome
        if r.after_s is not None and report.lead_s is not None and r.after_s > report.lead_s:
            outcome = "past the lead"
        row = (
            f"{r.node[:node_w]:<{node_w}} {rank:>4} {local:>5}  {sent:<12} {after:>9}  "
            f"{outcome:<14}  {exit_text(r.exit_code)}"
        )
        lines.append(row[:width])
    if not report.ranks:
        lines.append("no rank of the job was running")
    lines += ["", *_wrapped(report.headline, width)]
    return lines


def _wrapped(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines


async def drill_nodes(
    spec: JobSpec,
    backend: Backend,
    commands: Sequence[NodeCommand],
    followers: Sequence[asyncio.Future[Any]],
    rank_ends: Callable[[], Sequence[RankSummary]],
) -> DrillReport:
    """Drill every node of `commands` at once (Backend.drill), wait until the nodes' agents
    have ended (their `followers` done, at most SETTLE_S: their ranks' exit codes come with
    their end), and make the report of what the nodes timed and the agents said
    (`rank_ends`)."""
    at = time.time() + SYNC_S
    answers = await asyncio.gather(
        *(backend.drill(c, at) for c in commands), return_exceptions=True
    )
    if followers:
        await asyncio.wait(followers, timeout=SETTLE_S)
    reports: dict[str, Mapping[str, Any]] = {}
    problems = []
    for command, answer in zip(commands, answers, strict=True):
        if isinstance(answer, BackendError):
            problems.append(str(answer))
        elif isinstance(answer, BaseException):
            problems.append(f"{command.node}: {answer!r}")
        else:
            reports[command.node] = answer
    return DrillReport(
        tuple(spec.stop_signals),
        spec.grace,
        slurm_lead_s(spec),
        rank_exits(reports, rank_ends()),
        tuple(problems),
    )


def rank_exits(
    reports: Mapping[str, Mapping[str, Any]], ends: Sequence[RankSummary]
) -> tuple[RankExit, ...]:
    """Each node's report (node/drill.py) as rows, by global rank: the exit code the node saw
    (a zombie's wait status) first, else the one its agent said (`ends`: the monitor's ranks),
    else SIGKILL's for a rank the drill killed. A rank of a drilled node that its node did
    not find had ended before the signal: a row of its own, its agent's word its only one."""
    said = {(r.node, r.local_rank): r.exit_code for r in ends}
    rows = []
    for node, report in reports.items():
        for r in report.get("ranks", []):
            local = r.get("local_rank")
            code = r.get("code")
            if code is None and local is not None:
                code = said.get((node, int(local)))
            if code is None and r.get("killed"):
                code = -int(signal.SIGKILL)
            rows.append(
                RankExit(
                    node,
                    r.get("rank"),
                    local,
                    int(r["pid"]),
                    float(report.get("sent", 0.0)),
                    r.get("after"),
                    bool(r.get("killed")),
                    code,
                )
            )
    seen = {(r.node, r.local_rank) for r in rows}
    for r in ends:
        if r.node in reports and (r.node, r.local_rank) not in seen:
            sent = float(reports[r.node].get("sent", 0.0))
            rows.append(
                RankExit(r.node, r.rank, r.local_rank, 0, sent, None, False, r.exit_code, False)
            )
    return tuple(sorted(rows, key=lambda r: (r.rank is None, r.rank or 0, r.node)))
