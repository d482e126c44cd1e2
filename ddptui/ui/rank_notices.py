"""Provides rank_notices: the console's own short log notes for what torchrun's agent reported.

torchrun's agent lines are hidden from the default log view; what they told that matters
(the rendezvous result, restarts, failures) reaches the screen as rank events the core
decided, and shows in the logs as these notes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ddptui.core.events import RankChanged, RankState
from ddptui.core.monitor.patterns import signal_name
from ddptui.ui.widgets.logs.log_entry import LogEntry
from ddptui.ui.widgets.logs.log_fold import rank_set

MARK = "▸"
MAX_NODE_NOTES = 4


def rank_notices(
    known: Mapping[tuple[str, int], RankChanged],
    changes: Sequence[RankChanged],
    nproc_per_node: int = 0,
) -> list[LogEntry]:
    """Notes for `changes`, given the last change `known` for each rank before them.

    A node's rendezvous note waits until every rank of the node has its global rank
    (`nproc_per_node` of them, else every rank seen so far): the changes come in batches cut
    wherever the screen took them, and a run followed from launch or attached later must
    read the same (`runs ranks 0-1`, not a note per rank). A job of more than
    `MAX_NODE_NOTES` nodes gets one note for all, once its last node has its ranks.
    """
    seen = dict(known)
    touched: list[str] = []
    read_at: dict[str, int] = {}  # each node's line where its ranks were known
    notes: list[LogEntry] = []
    for event in changes:
        before = seen.get((event.node, event.local_rank))
        seen[(event.node, event.local_rank)] = event
        if event.rank is not None and (before is None or before.rank != event.rank):
            touched.append(event.node)
            read_at[event.node] = max(read_at.get(event.node, 0), event.seq)
        if event.restarts and (before is None or event.restarts > before.restarts):
            notes.append(_note(event.node, f"torchrun restarted the workers ({event.restarts})"))
        if event.state == RankState.FAILED and (before is None or before.state != event.state):
            notes.append(_note(event.node, _failure(event), event.rank))
    if not touched:
        return _once_per_node(notes)
    every = {node for node, _ in seen}
    big = len(every) > MAX_NODE_NOTES
    nodes = every if big else set(touched)
    after = _node_ranks(seen, nodes, nproc_per_node)
    earlier = _node_ranks(known, nodes, nproc_per_node)
    assigned: dict[str, list[int]] = {}
    if big:
        # A big job's rendezvous is one note, said when its last node has its ranks, however
        # the changes were cut into batches (a loaded screen takes a node or two at a time).
        if all(ranks is not None for ranks in after.values()) and after != earlier:
            assigned = {node: ranks for node, ranks in after.items() if ranks is not None}
    else:
        for node in dict.fromkeys(touched):
            ranks = after.get(node)
            if ranks is not None and ranks != earlier.get(node):
                assigned[node] = ranks
    return [*_rendezvous(assigned, read_at), *_once_per_node(notes)]


def _node_ranks(
    ranks: Mapping[tuple[str, int], RankChanged], nodes: set[str], nproc_per_node: int
) -> dict[str, list[int] | None]:
    """Each of `nodes`' global ranks by local rank, None while any is still unknown."""
    mine: dict[str, list[tuple[int, int | None]]] = {}
    for (node, local_rank), event in ranks.items():
        if node in nodes:
            mine.setdefault(node, []).append((local_rank, event.rank))
    out: dict[str, list[int] | None] = {}
    for node, pairs in mine.items():
        ranks_known = [rank for _, rank in sorted(pairs) if rank is not None]
        out[node] = ranks_known if len(ranks_known) == max(len(pairs), nproc_per_node) else None
    return out


def _rendezvous(assigned: dict[str, list[int]], read_at: Mapping[str, int]) -> list[LogEntry]:
    """A note per node, placed after the line that told its ranks, or one for all when many
    nodes joined at once (a big job's rendezvous is one event, not a screenful)."""
    if len(assigned) <= MAX_NODE_NOTES:
        return [
            _note(n, f"rendezvous: {n} runs ranks {rank_set(r)[1:]}")._replace(
                seq=read_at.get(n, 0)
            )
            for n, r in assigned.items()
        ]
    first = next(iter(assigned))
    every = [rank for ranks in assigned.values() for rank in ranks]
    text = f"rendezvous: {len(assigned)} nodes run ranks {rank_set(every)[1:]}"
    return [_note(first, text)._replace(seq=max(read_at.values(), default=0))]


def _failure(event: RankChanged) -> str:
    who = f"rank {event.rank}" if event.rank is not None else f"local rank {event.local_rank}"
    text = f"{who} failed"
    if event.exit_code is not None:
        killed = signal_name(event.exit_code)
        text += f": exit {event.exit_code}" + (f" ({killed})" if killed else "")
    if event.detail:
        text += f" — {event.detail}"
    return text


def detached_notes(nodes: Sequence[str], run_id: str) -> list[LogEntry]:
    """A note at the end of each node's log once the console let go of a run that goes on:
    the log stops there because this console stopped following, not because the job did."""
    text = f"detached: the job runs on; this log stops here (`ddptui attach {run_id}` follows it)"
    return [_note(node, text) for node in nodes]


def _note(node: str, text: str, rank: int | None = None) -> LogEntry:
    """A note about one rank carries it, so that a rank filter keeps or drops it too."""
    return LogEntry(node, f"{MARK} {text}", rank, note=True)


def _once_per_node(notes: list[LogEntry]) -> list[LogEntry]:
    """A restart note once per node and batch (every rank of a node reports the restart)."""
    out: list[LogEntry] = []
    seen: set[tuple[str, str]] = set()
    for note in notes:
        key = (note.node, note.text)
        if key not in seen:
            seen.add(key)
            out.append(note)
    return out
