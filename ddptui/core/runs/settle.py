"""Provides the outcome of local runs that ended while detached, read from their run directory.

A run detached from its console (closed, or `run --headless --detach`) runs on and ends by
itself; nothing records that end, so its history row would say `detached` forever. For a
run on this machine everything needed is on disk: each node's job helper wrote the node's
whole log and, when its torchrun ended, its exit code (`NNN-node.log.exit`, beside the log
in the run directory; `.pid` names the helper while it runs). The logs are read through the
same Monitor a live run uses, so the outcome, the ranks and the culprit are what a console
watching to the end would have recorded. Runs on SSH or Slurm nodes are asked only on
request (`ddptui history --refresh`), so that listing stays instant.
"""

from __future__ import annotations

import socket
import sqlite3
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ddptui.core.diagnose.failures import explanation
from ddptui.core.diagnose.job_watch import JobWatch
from ddptui.core.events import Event, NodeLines, RankState, StopReason
from ddptui.core.job.plan import LaunchPlan
from ddptui.core.job.spec import SpecError
from ddptui.core.node.reaper import is_alive
from ddptui.core.runs.history import RunHistory, RunRecord
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary

DETACHED, UNKNOWN = "detached", "unknown"
CHUNK = 1 << 16


@dataclass(frozen=True)
class NodeEnd:
    """What a node's job helper left on disk: its exit code (and when), or that it runs."""

    exit_code: int | None
    running: bool
    ended_at: float | None = None


def node_end(log: Path, here: bool) -> NodeEnd:
    """The node's end, from the helper's files beside its log (`here`: the helper ran on
    this machine, so whether it still runs can be asked; elsewhere it is taken to run)."""
    exit_file, pid_file = Path(f"{log}.exit"), Path(f"{log}.pid")
    try:
        code = int(exit_file.read_text().strip() or "1")
        return NodeEnd(code, False, exit_file.stat().st_mtime)
    except (OSError, ValueError):
        pass
    try:
        pids = [int(p) for p in pid_file.read_text().split()]
    except (OSError, ValueError):
        pids = []
    return NodeEnd(None, not here or any(is_alive(pid) for pid in pids))


def replay(
    plan: LaunchPlan,
    run: RunDir,
    ends: dict[str, NodeEnd],
    pattern: str = "",
    replica_groups: bool = False,
) -> list[Event]:
    """The run's events as a console following it to the end would have had them: each
    node's saved log through the Monitor, then the node's exit (`replica_groups`: a
    torchft job's, each node a group numbered from 0)."""
    monitor = JobWatch(plan.node_names, plan.nproc_per_node, pattern, replica_groups=replica_groups)
    events: list[Event] = list(monitor.initial_events())
    for command in plan.commands:
        end = ends[command.node]
        now = end.ended_at
        try:
            with open(run.node_log(command.index, command.node), "rb") as f:
                while chunk := f.read(CHUNK):
                    events += monitor.feed(command.node, chunk, now)
        except OSError:
            pass
        events += monitor.end_of_output(command.node)
        events += monitor.node_exited(command.node, end.exit_code)
    told = monitor.summary()
    ok = bool(told.ranks) and all(
        r.state == RankState.DONE and r.exit_code == 0 for r in told.ranks
    )
    detail = "finished while detached"
    if told.culprit is not None and told.culprit.rank is not None:
        cell = told.culprit
        said = explanation(cell.cause, cell.diagnoses) or cell.error
        detail += (
            f": rank {cell.rank} on {cell.node} failed first "
            f"(exit {cell.exit_code}){': ' + said if said else ''}"
        )
    elif not ok:
        codes = ", ".join(f"{node} exit {e.exit_code}" for node, e in ends.items())
        detail += f": {codes}"
    world = plan.nproc_per_node * len(plan.commands)
    summary = RunSummary(
        ok,
        world,
        told.ranks,
        str(run.path),
        run.run_id,
        detail,
        stopped_by=StopReason.FINISHED if ok else StopReason.FAILURE,
        failures=told.failures,
        ts=max((e.ended_at or 0.0 for e in ends.values()), default=0.0) or time.time(),
    )
    return [*events, summary]


def settle_local(record: RunRecord, history: RunHistory) -> str:
    """Bring one local run left detached up to date; returns what became of it, in words
    (empty while its job still runs)."""
    run = record.run()
    try:
        plan, _state = run.read_plan()
        spec = run.read_spec()
    except (SpecError, FileNotFoundError) as exc:
        history.update(record.id, detail=f"still marked detached: {exc}")
        return str(exc)
    host = record.extra.get("console_host")
    here = not host or host == socket.gethostname()
    ends = {c.node: node_end(run.node_log(c.index, c.node), here) for c in plan.commands}
    if any(e.running for e in ends.values()):
        if not here and all(e.exit_code is None for e in ends.values()):
            why = f"its nodes ran from {host}: only there can they be asked"
            history.update(record.id, detail=f"still marked detached: {why}")
            return why
        return ""
    lost = [n for n, e in ends.items() if e.exit_code is None]
    events = replay(plan, run, ends, spec.progress_pattern, bool(spec.ft_replicas))
    summary = events[-1]
    assert isinstance(summary, RunSummary)
    if lost:
        summary = _lost(summary, lost)
    current = history.get(record.id)
    if current is None or current.status != DETACHED:
        return ""  # attached again meanwhile: that console records the end
    for event in events[:-1]:
        if not isinstance(event, NodeLines):
            run.record(event)
    run.record(summary)
    run.write_summary(summary.to_dict())
    run.close()
    history.finished(summary, ended=summary.ts)
    if lost:
        history.update(record.id, status=UNKNOWN)
    return summary.detail


def _lost(summary: RunSummary, nodes: list[str]) -> RunSummary:
    """A node whose helper is gone without writing an exit code (the machine restarted, the
    helper was killed): how the run ended cannot be told, and the detail says so."""
    names = ", ".join(nodes)
    detail = (
        f"ended while detached, but {names} left no exit code (the machine restarted or its "
        f"job helper was killed): the outcome cannot be told; the logs are in {summary.run_dir}"
    )
    return replace(summary, ok=False, detail=detail, stopped_by=StopReason.ERROR)


def settle_detached(history: RunHistory | None = None) -> dict[str, str]:
    """Every local run still marked detached, brought up to date from its run directory
    (those whose job still runs are left as they are). Returns, by run id, what became of
    each that changed or could not be read."""
    history = history or RunHistory()
    done: dict[str, str] = {}
    for record in history.runs():
        if record.status == DETACHED and record.backend == "local":
            said = settle_local(record, history)
            if said:
                done[record.id] = said
    return done


def settle_quietly(history: RunHistory | None = None) -> dict[str, str]:
    """`settle_detached` where its failure must stop nothing (a console starting): a history
    that cannot be read or written leaves the runs as they were."""
    try:
        return settle_detached(history)
    except (sqlite3.Error, OSError):
        return {}
