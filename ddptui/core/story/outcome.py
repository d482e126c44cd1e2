"""Provides the outcome's words: the summary's `detail` for each way a run ends.

The session decides how a run ended (its `StopReason`, whether it was ok); these functions
say it. The story's lead (story.py `told_first`) is put before them, so that every surface
reads the same first line; what they add is the second: who failed first among the ranks the
lead blames, the operator's stop and what the run was doing when it came, an elastic run's
finish, a detached run's way back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ddptui.core.diagnose.failures import explanation
from ddptui.core.diagnose.stall_events import FlightRecorderReport, StallReport
from ddptui.core.events import RankState, RankSummary
from ddptui.core.monitor.cycles import RestartCycle
from ddptui.core.story.incident import Incident


def first_blamed(
    lead: Incident | None, culprit: RankSummary, ranks: Sequence[RankSummary]
) -> RankSummary | None:
    """The failed rank the outcome's second line names: the monitor's first failure, or,
    where the story's lead blames other ranks (an agent lost: its node's ranks, stopped by
    the node helper; a survivor's error came first), the first of those that failed (the
    lead's ranks, or its nodes' where it names no rank); None when none of them did (the
    lead says it alone, no survivor named)."""
    if lead is None or not (lead.blamed or lead.nodes):
        return culprit

    def blamed(cell: RankSummary) -> bool:
        return cell.rank in lead.blamed if lead.blamed else cell.node in lead.nodes

    if blamed(culprit):
        return culprit
    failed = [r for r in ranks if blamed(r) and r.state == RankState.FAILED]
    return failed[0] if failed else None


def marked_by_lead(lead: Incident | None, ranks: Sequence[RankSummary]) -> tuple[RankSummary, ...]:
    """The ranks with the culprit the story's lead names, for a run whose lead is not a
    rank's failure (the scheduler ended it): the first rank it blames, else the first of
    the nodes it names (a node Slurm lost); no culprit where it names neither (a preemption,
    the time limit). The grid (Incident.marks, the same rule), history and the summary then
    name who the first line does."""
    first = next((r for r in ranks if lead is not None and lead.marks(r.node, r.rank)), None)
    return tuple(replace(r, culprit=r is first) for r in ranks)


def failed_first(cell: RankSummary, backend_error: str = "") -> str:
    """`rank R on NODE failed first (exit N): its error`; a rank the rendezvous never
    numbered has the backend's own words instead, where it said any (srun refused, ...)."""
    if cell.rank is None and backend_error:
        return backend_error
    said = explanation(cell.cause, cell.diagnoses) or cell.error
    return f"rank {cell.rank} on {cell.node} failed first (exit {cell.exit_code})" + (
        f": {said}" if said else ""
    )


def operator_stop(
    ranks: Sequence[RankSummary],
    stall: StallReport | None,
    recorder: FlightRecorderReport | None,
    drill: bool = False,
) -> str:
    """The operator's stop (or a drill's), how far the ranks got, and what the run was doing
    when it came: a deadlock, a stall and its suspects, the flight recorder's finding."""
    done = sum(r.state == RankState.DONE for r in ranks)
    how = "ended by a drill" if drill else "torn down by the operator"
    detail = f"{how} ({done}/{len(ranks)} ranks done)"
    if stall is not None and stall.deadlock:
        halves = " and ".join(
            f"ranks {', '.join(map(str, g.ranks))} in {g.collective or 'a collective'}"
            for g in stall.groups
        )
        detail += f"; it had stalled in a deadlock: {halves}"
    elif stall is not None:
        who = ", ".join(map(str, stall.suspects)) or "none singled out"
        detail += f"; it had stalled (suspects: {who})"
    if recorder is not None and recorder.collectives:
        detail += f"; flight recorder: {recorder.collectives[0]}"
    return detail


def elastic_finish(cycles: Sequence[RestartCycle], absent: Sequence[str]) -> str:
    """An elastic run that finished: on how many nodes, after how many restart cycles, and
    which nodes never joined ("" when it finished as it began)."""
    if len(cycles) > 1:
        return (
            f"elastic: finished on {len(cycles[-1].nodes)} node(s) after "
            f"{len(cycles) - 1} restart cycle(s)"
        )
    if absent and cycles:
        return (
            f"elastic: finished on {len(cycles[-1].nodes)} node(s); "
            f"{', '.join(sorted(absent))} never joined the rendezvous"
        )
    return ""


def detached(run_id: str, watched: bool) -> str:
    """A run the console let go of: it runs on, and the way back to it."""
    said = f"detached: the job runs on; `ddptui attach {run_id}` follows it"
    return said + ("; a watcher follows it meanwhile to notify" if watched else "")
