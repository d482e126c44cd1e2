"""The console's own notes for what torchrun's agent reported (its lines are hidden)."""

from __future__ import annotations

from ddptui.core.events import Event, NodeLines, RankChanged, RankState
from ddptui.core.monitor.monitor import Monitor
from ddptui.ui.rank_notices import rank_notices
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from ddptui.ui.widgets.logs.log_entry import LogEntry
from tests.cases import TORCHRUN_CAPTURES

from .conftest import SIZE
from .widget_host import WidgetHost


def test_rendezvous_restarts_and_failures_become_short_notes() -> None:
    assigned = [RankChanged(r, f"n{r // 2}", r % 2, RankState.ASSIGNED) for r in range(4)]
    notes = rank_notices({}, assigned)
    assert [(n.node, n.text) for n in notes] == [
        ("n0", "▸ rendezvous: n0 runs ranks 0-1"),
        ("n1", "▸ rendezvous: n1 runs ranks 2-3"),
    ]
    assert all(n.note for n in notes)
    known = {(e.node, e.local_rank): e for e in assigned}
    restarted = [RankChanged(r, f"n{r // 2}", r % 2, RankState.RUNNING, restarts=1) for r in (0, 1)]
    assert [n.text for n in rank_notices(known, restarted)] == [
        "▸ torchrun restarted the workers (1)"
    ]
    failed = RankChanged(3, "n1", 1, RankState.FAILED, -9, "killed")
    assert [n.text for n in rank_notices(known, [failed])] == [
        "▸ rank 3 failed: exit -9 (SIGKILL) — killed"
    ]
    assert rank_notices({**known, ("n1", 1): failed}, [failed]) == []  # said once


def test_a_big_rendezvous_is_one_note() -> None:
    assigned = [RankChanged(r, f"n{r // 8}", r % 8, RankState.ASSIGNED) for r in range(1024)]
    notes = rank_notices({}, assigned)
    assert [n.text for n in notes] == ["▸ rendezvous: 128 nodes run ranks 0-1023"]


def test_a_big_rendezvous_taken_a_node_at_a_time_is_still_one_note() -> None:
    """A loaded screen takes the changes a node or two at a time: one note, at the last."""
    pending = [RankChanged(None, f"n{r // 8}", r % 8, RankState.PENDING) for r in range(1024)]
    known = {(e.node, e.local_rank): e for e in pending}
    said: list[str] = []
    for node in range(128):
        batch = [RankChanged(node * 8 + i, f"n{node}", i, RankState.ASSIGNED) for i in range(8)]
        said += [n.text for n in rank_notices(known, batch, 8)]
        known.update({(e.node, e.local_rank): e for e in batch})
        assert said == ([] if node < 127 else ["▸ rendezvous: 128 nodes run ranks 0-1023"])
    running = [RankChanged(r, f"n{r // 8}", r % 8, RankState.RUNNING) for r in range(1024)]
    assert rank_notices(known, running, 8) == []  # the same ranks: nothing new to say


def _notes(batches: list[list[RankChanged]], nproc: int) -> list[tuple[str, str]]:
    """The notes the job screen writes for these batches of rank changes, in order."""
    known: dict[tuple[str, int], RankChanged] = {}
    out: list[tuple[str, str]] = []
    for batch in batches:
        out += [(n.node, n.text) for n in rank_notices(known, batch, nproc)]
        known.update({(e.node, e.local_rank): e for e in batch})
    return out


def _ranks(events: list[Event]) -> list[RankChanged]:
    return [e for e in events if isinstance(e, RankChanged)]


def test_notes_of_a_replayed_log_equal_the_live_ones() -> None:
    """Live, the nodes' lines come a few at a time and each feed's changes are one batch;
    attached later, the whole log comes at once and the screen may take the changes one by
    one. The notes read the same: `runs ranks 0-1`, once per node."""
    logs = {"hx-n1": "crash_node0.log", "hx-n2": "crash_node1.log"}
    live_monitor, replay_monitor = Monitor(list(logs), 2), Monitor(list(logs), 2)
    live = [_ranks(live_monitor.initial_events())]
    replayed = [[e] for e in _ranks(replay_monitor.initial_events())]
    for node, name in logs.items():
        data = (TORCHRUN_CAPTURES / name).read_bytes()
        for line in data.splitlines(keepends=True):
            live.append(_ranks(live_monitor.feed(node, line)))
        live.append(_ranks(live_monitor.end_of_output(node)))
        events = replay_monitor.feed(node, data) + replay_monitor.end_of_output(node)
        replayed += [[e] for e in _ranks(events)]
    expected = [
        ("hx-n1", "▸ rendezvous: hx-n1 runs ranks 0-1"),
        ("hx-n2", "▸ rendezvous: hx-n2 runs ranks 2-3"),
    ]
    live_notes = _notes(live, 2)
    assert [n for n in live_notes if "rendezvous" in n[1]] == expected
    assert _notes(replayed, 2) == live_notes


async def test_an_attached_runs_rendezvous_note_sits_before_its_ranks_lines() -> None:
    """Attaching, the whole log reaches the panes before the rank changes read in it; the
    rendezvous note still goes where torchrun said it (before the ranks' first lines), not
    after the last line on screen."""
    node = "hx-n1"
    data = (TORCHRUN_CAPTURES / "crash_node0.log").read_bytes()
    monitor = Monitor([node], 2)
    events = monitor.feed(node, data) + monitor.end_of_output(node)
    lines = [line for e in events if isinstance(e, NodeLines) for line in e.each()]
    entries = [LogEntry(node, line.text, line.rank, seq=line.seq) for line in lines]
    deck = NodeLogDeck([node])
    async with WidgetHost(deck).run_test(size=SIZE) as pilot:
        deck.append(entries)
        await pilot.pause()
        deck.add_notes(rank_notices({}, _ranks(events), 2))
        await pilot.pause()
        pane = deck.pane(node)
        assert pane is not None
        shown = list(pane.lines)
        note = shown.index("▸ rendezvous: hx-n1 runs ranks 0-1")
        assert note == 0 and len(shown) > 5  # the ranks' every line after it
        said = [f"[r{e.rank}] {e.text}" for e in entries if e.rank is not None]
        assert shown[1 : 1 + len(said)] == said
        merged = list(deck.merged_view.lines)
        assert merged.index("▸ rendezvous: hx-n1 runs ranks 0-1") == 0
