"""Log views follow new lines until the operator scrolls away; the relay batches lines."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from ddptui.core.events import NodeLines, RankChanged, RankState
from ddptui.ui.messages import RankUpdates
from ddptui.ui.relay import SessionRelay
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from ddptui.ui.widgets.logs.log_entry import LogEntry

from .conftest import SIZE
from .widget_host import WidgetHost

DATA = Path(__file__).resolve().parents[1] / "data"


def entries(node: str, texts: list[str], rank: int | None = 0) -> list[LogEntry]:
    return [LogEntry(node, text, rank) for text in texts]


async def test_log_view_follows_until_scrolled_up() -> None:
    deck = NodeLogDeck(["local0", "local1"])
    async with WidgetHost(deck).run_test(size=SIZE) as pilot:
        pane = deck.pane("local0")
        assert pane is not None
        for batch in range(10):  # long lines: the horizontal scrollbar appears late
            deck.append(
                entries("local0", [f"batch {batch} line {i} " + "x" * 300 for i in range(25)])
            )
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        assert pane.line_count == 250
        assert pane.lines[0].startswith("[r0] batch 0 line 0")
        assert pane.scroll_y == pane.max_scroll_y > 0

        pane.focus()
        await pilot.press("up", "up")
        assert not pane.following
        where = pane.scroll_y
        deck.append(entries("local0", ["more"] * 50))
        await pilot.pause(0.3)
        assert pane.scroll_y == where  # the operator's place is kept

        await pilot.press("end")
        await pilot.pause(0.3)
        assert pane.following
        deck.append(entries("local0", ["yet more"] * 50))
        await pilot.pause(0.3)
        assert pane.scroll_y == pane.max_scroll_y


async def test_each_node_pane_shows_its_node_and_the_merged_view_all() -> None:
    deck = NodeLogDeck(["local0", "local1"])
    async with WidgetHost(deck).run_test(size=SIZE) as pilot:
        deck.append(
            [
                LogEntry("local0", "agent says hi"),
                LogEntry("local0", "hello from 0", 0, seq=2),
                LogEntry("local1", "hello from 3", 3, seq=1),
            ]
        )
        await pilot.pause()
        local0, local1 = deck.pane("local0"), deck.pane("local1")
        assert local0 is not None and local1 is not None
        assert list(local0.lines) == ["[r0] hello from 0"]  # torchrun's lines: hidden
        assert deck.toggle_agent_lines()
        await pilot.pause()
        assert list(local0.lines) == ["agent says hi", "[r0] hello from 0"]
        assert list(local1.lines) == ["[r3] hello from 3"]
        assert list(deck.merged_view.lines) == [
            "[local0] agent says hi",
            "[local0/r0] hello from 0",
            "[local1/r3] hello from 3",
        ]


async def test_the_merged_view_folds_lines_repeated_across_ranks_on_request() -> None:
    deck = NodeLogDeck(["n0", "n1"])
    async with WidgetHost(deck).run_test(size=SIZE) as pilot:
        epoch = "Epoch 3 | Batchsize: 32 | Steps: 8"
        batch = [
            LogEntry(f"n{rank // 8}", epoch if rank != 7 else epoch[:-1] + "9", rank, seq=rank)
            for rank in range(16)
        ]
        deck.append(batch)
        merged = deck.merged_view
        assert merged.line_count == 16
        assert deck.toggle_fold()
        await pilot.pause()
        # rank 7's `Steps: 9` differs in a number only: it folds, the range says so
        assert list(merged.lines) == [f"[r0-15] {epoch}..9"]
        deck.append([LogEntry("n1", "done", 9, seq=20), LogEntry("n0", "done", 2, seq=21)])
        deck.append([LogEntry("n1", "finished", 10, seq=22)])
        assert list(merged.lines)[1:] == ["[r2,9] done", "[n1/r10] finished"]
        pane = deck.pane("n1")
        assert pane is not None and pane.line_count == 10  # the node panes never fold
        assert not deck.toggle_fold()
        await pilot.pause()
        assert merged.line_count == 19


async def test_views_are_bounded_and_say_what_was_skipped() -> None:
    deck = NodeLogDeck(["local0", "local1"])
    async with WidgetHost(deck).run_test(size=SIZE) as pilot:
        pane = deck.pane("local1")
        assert pane is not None
        limit = pane.max_lines
        assert limit is not None
        deck.append(entries("local1", [f"line {i}" for i in range(limit + 500)]), {"local1": 42})
        await pilot.pause()
        assert pane.line_count == limit
        assert len(deck.store) == limit
        assert pane.lines[-1] == f"[r0] line {limit + 499}"
        merged = deck.merged_view
        assert merged.line_count == limit
        deck.append([], {"local1": 7})
        await pilot.pause()
        assert "7 line(s) of local1 skipped" in pane.lines[-1]


def test_relay_buffers_lines_in_order_and_posts_the_rest() -> None:
    posted: list[object] = []
    relay = SessionRelay(posted.append, buffer_lines=3)
    relay.emit(NodeLines("n0", [("agent says hi", None, None)], 1))
    relay.emit(NodeLines("n0", [(f"line {i}", 3, 1) for i in range(2)], 2))
    relay.emit(NodeLines("n0", [(f"line {i}", 3, 1) for i in range(2, 4)], 4))
    relay.emit(NodeLines("n1", [("other", 0, 0)], 1))
    relay.emit(RankChanged(3, "n0", 1, RankState.RUNNING))
    assert len(posted) == 1
    assert isinstance(posted[0], RankUpdates)

    lines, dropped = relay.drain()
    assert [(e.node, e.rank, e.text, e.seq) for e in lines] == [
        ("n0", 3, "line 2", 4),
        ("n0", 3, "line 3", 5),
        ("n1", 0, "other", 1),
    ]
    assert dropped == {"n0": 3}
    assert relay.drain() == ([], {})


def test_rank_changes_gather_in_one_message_until_it_is_taken() -> None:
    posted: list[object] = []
    relay = SessionRelay(posted.append)
    first = [
        RankChanged(None, "n0", 0, RankState.ASSIGNED),
        RankChanged(0, "n0", 0, RankState.RUNNING),
    ]
    for event in first:
        relay.emit(event)
    relay.emit(RankChanged(1, "n0", 1, RankState.RUNNING))
    assert len(posted) == 1 and isinstance(posted[0], RankUpdates)
    assert [(e.local_rank, e.state) for e in posted[0].take()] == [
        (0, RankState.ASSIGNED),
        (0, RankState.RUNNING),
        (1, RankState.RUNNING),
    ]
    relay.emit(RankChanged(0, "n0", 0, RankState.DONE, 0))
    assert len(posted) == 2 and isinstance(posted[1], RankUpdates)
    assert [e.state for e in posted[1].take()] == [RankState.DONE]


async def test_the_status_says_which_of_how_many_logs_when_the_tabs_are_cut() -> None:
    """At 80 columns 24 nodes' tabs do not fit: the status line says `(3/25)`."""
    many = NodeLogDeck([f"node{i:02d}" for i in range(24)])
    async with WidgetHost(many).run_test(size=(80, 24)) as pilot:
        many.show("node02")
        await pilot.pause(0.1)
        assert "node02 (3/25)" in str(many.query_one("#log-status", Static).render())
    few = NodeLogDeck(["local0", "local1"])
    async with WidgetHost(few).run_test(size=(80, 24)) as pilot:
        few.show("local1")
        await pilot.pause(0.1)
        status = str(few.query_one("#log-status", Static).render())
        assert "local1" in status and "/3)" not in status


async def test_torchfts_routine_logs_are_hidden_with_torchruns_and_its_warnings_kept() -> None:
    """A torchft group's log (tests/data/torchft: a real run's): its Manager's INFO lines,
    about seven a step, are shown with torchrun's own lines; the rank's own lines, torch's
    warnings and torchft's warnings stay in sight."""
    captured = (DATA / "torchft" / "kill_heal" / "group1.log").read_text().splitlines()
    captured.append("2026-11-27T16:51:02.001 [WARN] [torchft::manager] - [Replica ft_1] timed out")
    deck = NodeLogDeck(["node1"])
    async with WidgetHost(deck).run_test(size=SIZE) as pilot:
        deck.append([LogEntry("node1", line, 0, seq=i) for i, line in enumerate(captured)])
        await pilot.pause()
        pane = deck.pane("node1")
        assert pane is not None
        shown = [line.removeprefix("[r0] ") for line in pane.lines]
        routine = [s for s in captured if "[INFO] [torchft::" in s or s.startswith("INFO torchft")]
        assert len(routine) >= 40 and not set(routine) & set(shown)
        assert [line for line in captured if line not in routine] == shown
        assert any(line.startswith("ft replica=1 rank=0 step=") for line in shown)
        assert shown[-1].endswith("timed out")  # torchft's warning: not routine
        assert deck.toggle_agent_lines()
        await pilot.pause()
        assert len(pane.lines) == len(captured)
