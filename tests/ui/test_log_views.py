"""Log views: merged prefixes, filter, search with next/previous, follow, wrap, timestamps,
save, `g g`, the `:` command line, and floods."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.ui.app import DdpApp
from ddptui.ui.commands import CommandError, parse_command
from ddptui.ui.relay import DEFAULT_BUFFER_LINES, TICK_LINES, SessionRelay
from ddptui.ui.widgets.logs.log_entry import LogEntry
from ddptui.ui.widgets.logs.log_filter import FilterError, LogFilter
from ddptui.ui.widgets.logs.log_rows import format_entry, wrap_rows
from ddptui.ui.widgets.logs.log_view import LogView

from .conftest import SIZE, local_spec
from .replay import RUN_ID, crash_events, feed


def lines_of(view: LogView) -> list[str]:
    return list(view.lines)


async def test_filter_by_rank_node_and_regex() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, crash_events())
        await pilot.press("m", "f", *"rank:1", "enter")
        await pilot.pause()
        merged = screen.logs.merged_view
        shown = lines_of(merged)
        notes = ("▸ rank 1 failed", "▸ rendezvous")  # the console's: of this rank, or of all
        assert shown and all(t.startswith(("[local0/r1] ", *notes)) for t in shown)
        assert any(t.startswith("▸ rank 1 failed") for t in shown)  # the console's note
        assert "filter rank:1" in str(screen.logs.query_one("#log-status").render())

        await pilot.press("f", "ctrl+u", *"node:local1 closed by", "enter")
        await pilot.pause()
        shown = lines_of(merged)
        assert shown
        assert all(t.startswith(("[local1", "▸ rank")) and "closed by" in t for t in shown)

        await pilot.press("f", "ctrl+u", *"node:nowhere", "enter")
        await pilot.pause()
        assert lines_of(merged) == shown  # refused, with a message: the filter stays
        await pilot.press("f", "ctrl+u", "enter")
        await pilot.pause()
        assert not merged.user_filter.active
        shown_by_default = [e for e in screen.logs.store if e.rank is not None or e.note]
        assert len(lines_of(merged)) == len(shown_by_default)  # torchrun's own lines: hidden


async def test_search_next_and_previous_wrap_around() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, crash_events())
        await pilot.press("m", "slash", *"traceback \\(most", "enter")
        await pilot.pause()
        view = screen.logs.merged_view
        rows = [i for i, t in enumerate(view.lines) if "Traceback (most recent" in t]
        assert view.matches == len(rows) >= 4
        first = view.match_row
        assert first in rows
        await pilot.press("n")
        assert view.match_row == rows[(rows.index(first) + 1) % len(rows)]
        await pilot.press("N", "N")
        assert view.match_row == rows[(rows.index(first) - 1) % len(rows)]
        assert not view.following  # a search stops following so the match stays in view


async def test_follow_wrap_and_timestamps_toggle() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        deck.append([LogEntry("local0", "x" * 300, 0, ts=1_795_666_886.25, seq=1)])
        await pilot.pause()
        view = deck.pane("local0")
        assert view is not None and view.line_count == 1
        await pilot.press("w")
        await pilot.pause()
        assert view.line_count > 1 and all(len(t) <= view.size.width for t in view.lines)
        await pilot.press("w", "T")
        await pilot.pause()
        assert view.line_count == 1
        assert view.lines[0][:13].count(":") == 2 and view.lines[0][12] == " "  # HH:MM:SS.mmm
        await pilot.press("F")
        assert not view.following
        await pilot.press("F")
        assert view.following


async def test_g_g_goes_to_the_top_and_g_alone_does_not() -> None:
    app = DdpApp(local_spec(), keymap_path="vim")
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        deck.append([LogEntry("local0", f"line {i}", 0, seq=i) for i in range(500)])
        await pilot.pause()
        view = deck.pane("local0")
        assert view is not None
        view.focus()
        await pilot.pause()
        assert view.scroll_y == view.max_scroll_y > 0
        await pilot.press("g", "k")  # the prefix is spent on k: no jump
        assert 0 < view.scroll_y < view.max_scroll_y
        await pilot.press("g", "g")
        assert view.scroll_y == 0
        await pilot.press("G")
        await pilot.pause()
        assert view.following and view.scroll_y == view.max_scroll_y


async def test_save_writes_the_visible_log_into_the_run_dir(tmp_path: Path) -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        await pilot.press("S")  # no run yet: nothing to save, said so
        assert screen.logs.saved_to is None
        feed(screen, crash_events())
        await pilot.press("m", "f", *"rank:1", "enter")
        path = screen.logs.save(tmp_path / RUN_ID / "saved")
        assert path.parent == tmp_path / RUN_ID / "saved"
        text = path.read_text().splitlines()
        assert text == lines_of(screen.logs.merged_view)
        assert f"saved {path}" in str(screen.logs.query_one("#log-status").render())


async def test_command_line_runs_actions_by_name() -> None:
    app = DdpApp(local_spec(nodes=3))
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        await pilot.press("colon", *"node local2", "enter")
        assert deck.active_node == "local2"
        await pilot.press("colon", *"all", "enter")
        assert deck.active_node is None
        await pilot.press("colon", *"wrap", "enter")
        assert deck.merged_view.wrap
        await pilot.press("colon", *"bogus", "enter")
        await pilot.pause()
        assert app.is_running
        await pilot.press("colon", "escape")
        assert not app.job_screen.prompt.is_open
        await pilot.press("colon", "q", "enter")
        await pilot.pause()
    assert app.return_value == 0


def test_command_parsing() -> None:
    assert parse_command(":launch").binding_id == "job.launch"
    assert parse_command("q").binding_id == "app.quit"
    assert parse_command("w").binding_id == "logs.save"
    assert parse_command("filter rank:1 boom").argument == "rank:1 boom"
    assert parse_command("/NCCL").name == "search"
    assert parse_command("nofilter").name == "filter"
    with pytest.raises(CommandError, match="no command 'lanch'.*launch"):
        parse_command("lanch")
    with pytest.raises(CommandError, match="takes no argument"):
        parse_command("launch now")


def test_filter_parsing_and_formatting() -> None:
    f = LogFilter.parse("node:local1 rank:0-2 rank:5 NCCL", ["local0", "local1"])
    assert f.nodes == {"local1"} and f.ranks == {0, 1, 2, 5}
    assert f.pattern is not None and f.pattern.pattern == "NCCL"
    assert f.accepts(LogEntry("local1", "NCCL WARN", 2))
    assert not f.accepts(LogEntry("local1", "nccl warn", 2))  # upper case: case-sensitive
    assert LogFilter.parse("nccl").accepts(LogEntry("n", "NCCL", 0))  # lower case: any case
    with pytest.raises(FilterError, match="no node 'local9'"):
        LogFilter.parse("node:local9", ["local0"])
    with pytest.raises(FilterError, match="rank:x"):
        LogFilter.parse("rank:x")
    with pytest.raises(FilterError, match="not a regular expression"):
        LogFilter.parse("(")
    entry = LogEntry("local0", "hi", 3)
    assert format_entry(entry, merged=True, timestamps=False).text == "[local0/r3] hi"
    assert format_entry(entry, merged=False, timestamps=False).text == "[r3] hi"
    assert wrap_rows("abcdef", 4) == ["abcd", "ef"]
    assert wrap_rows("漢字漢字", 4) == ["漢字", "漢字"]


async def test_a_flood_stays_bounded_and_the_console_answers_keys() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        relay: SessionRelay = screen.relay
        from ddptui.core.events import NodeLines

        for first in range(0, 60_000, 500):
            for node in (0, 1):
                lines = [
                    (f"flood line {i}", i % 4, i % 2) for i in range(first + node, first + 500, 2)
                ]
                relay.emit(NodeLines(f"local{node}", lines, first + node))
        ticks = 0
        while relay._buffer.held:  # a tick takes the oldest TICK_LINES of what the relay kept
            screen._flush_logs()
            ticks += 1
        assert ticks == DEFAULT_BUFFER_LINES // TICK_LINES
        await pilot.press("right_square_bracket")
        assert screen.logs.active_node == "local1"
        deck = screen.logs
        assert len(deck.store) <= deck.max_lines
        for view in deck.views:
            assert view.line_count <= deck.max_lines
        merged = deck.merged_view
        assert "skipped" in merged.lines[0]  # the relay kept the newest; it says so
        assert merged.lines[-1] == "[local1/r3] flood line 59999"
