"""Log keys while lines arrive: routing to the views, scrolling up by key, opening a view at
its end, and switching logs without rebuilding the footer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from textual import events
from textual.widgets._footer import FooterKey

from ddptui.core.events import NodeState
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.confirm import ConfirmScreen
from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from ddptui.ui.widgets.logs.log_entry import LogEntry
from ddptui.ui.widgets.logs.log_view import LogView

from .conftest import SIZE, local_spec, wait_for
from .widget_host import WidgetHost


def lines(node: str, count: int, start: int = 0) -> list[LogEntry]:
    return [LogEntry(node, f"{node} line {i}", 0, seq=i) for i in range(start, start + count)]


@asynccontextmanager
async def flooding(deck: NodeLogDeck, node: str) -> AsyncIterator[None]:
    """Lines keep arriving for `node` (as the screen's timer delivers them) while inside."""
    stop = asyncio.Event()

    async def feed() -> None:
        seq = 10_000
        while not stop.is_set():
            deck.append(lines(node, 5, seq))
            seq += 5
            await asyncio.sleep(0.005)

    task = asyncio.create_task(feed())
    try:
        yield
    finally:
        stop.set()
        await task


def recording(view: LogView, handed: list[LogEntry]) -> Callable[[Sequence[LogEntry]], None]:
    """The view's append, noting what the deck hands it."""
    append = view.append

    def spy(entries: Sequence[LogEntry]) -> None:
        handed.extend(entries)
        append(entries)

    return spy


def end_shows(view: LogView) -> bool:
    return view.scroll_y == view.max_scroll_y > 0 and view.scroll_y + view.size.height >= len(
        view.lines
    )


async def test_a_node_s_lines_reach_only_its_own_view_and_the_merged_view() -> None:
    deck = NodeLogDeck(["local0", "local1", "local2"])
    async with WidgetHost(deck).run_test(size=SIZE) as pilot:
        handed: dict[str | None, list[LogEntry]] = {view.node: [] for view in deck.views}
        for view in deck.views:
            view.append = recording(view, handed[view.node])  # type: ignore[method-assign,assignment]
        batch = [e for i in range(4) for e in (lines("local0", 1, i) + lines("local2", 1, i))]
        deck.append(batch, {"local2": 3})
        await pilot.pause()

        merged = handed[None]
        assert "3 line(s) of local2 skipped" in merged[0].text and merged[1:] == batch
        assert handed["local0"] == [e for e in batch if e.node == "local0"]
        assert handed["local1"] == []
        assert handed["local2"][0].note and handed["local2"][1:] == lines("local2", 4)
        counts = {view.node: view.line_count for view in deck.views}
        assert counts == {"local0": 4, "local1": 0, "local2": 5, None: 9}
        assert deck.pane("local2").lines[-1] == "[r0] local2 line 3"  # type: ignore[union-attr]


async def test_up_while_lines_arrive_stops_following_and_end_follows_again() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        view = deck.active_view
        assert view.node == "local0" and view.has_focus
        deck.append(lines("local0", 300))
        await pilot.pause()
        assert view.following and end_shows(view)

        async with flooding(deck, "local0"):
            for key in ("up", "up", "pageup"):
                await pilot.press(key)
                await pilot.pause(0.05)
                assert not view.following, key
            where = view.scroll_y
            assert where < view.max_scroll_y
            await pilot.pause(0.2)
            assert view.scroll_y == where and not view.following  # the operator's place stays

            await pilot.press("end")
            await pilot.pause(0.1)
            assert view.following
        await pilot.pause()
        assert view.following and end_shows(view)


async def test_home_and_the_wheel_stop_following_too() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        view = deck.active_view
        deck.append(lines("local0", 300))
        await pilot.pause()
        async with flooding(deck, "local0"):
            await pilot.press("home")
            await pilot.pause(0.1)
            assert not view.following and view.scroll_y == 0
            await pilot.press("end")
            await pilot.pause(0.1)
            assert view.following
            view.post_message(events.MouseScrollUp(view, 5, 5, 0, -1, 0, False, False, False))
            await pilot.pause(0.1)
            assert not view.following and view.scroll_y < view.max_scroll_y


async def test_a_view_that_got_lines_while_hidden_opens_at_its_end() -> None:
    app = DdpApp(local_spec(nodes=3))
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        assert deck.active_node == "local0"
        deck.append(lines("local1", 400) + lines("local2", 400))
        await pilot.pause()

        await pilot.press("right_square_bracket")
        await pilot.pause()
        local1 = deck.active_view
        assert local1.node == "local1" and local1.has_focus
        assert local1.following and end_shows(local1)

        await pilot.press("right_square_bracket")
        deck.append(lines("local1", 100, 400))  # more for local1 while it is hidden again
        await pilot.pause()
        await pilot.press("left_square_bracket")
        await pilot.pause()
        assert deck.active_view is local1 and end_shows(local1)

        tab = deck.tab_bar.span_of(2)  # a click on the tab as well
        assert tab is not None
        await pilot.click("#logs #log-tabs", offset=(tab.start + 1, 0))
        await pilot.pause()
        local2 = deck.active_view
        assert local2.node == "local2" and local2.following and end_shows(local2)


async def test_switching_logs_keeps_the_footer_and_it_still_shows_new_keys() -> None:
    app = DdpApp(local_spec(nodes=3))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        await pilot.pause()
        keys = list(screen.query(FooterKey))
        assert any(key.description == "Next log" for key in keys)

        await pilot.press("right_square_bracket", "right_square_bracket", "m")
        await pilot.pause()
        assert screen.logs.active_node is None and screen.logs.merged_view.has_focus
        assert list(screen.query(FooterKey)) == keys  # the same widgets: no rebuild

        app.update_keymap({"logs.next": "x"})
        await pilot.pause()
        shown = {key.description: key.key_display for key in screen.query(FooterKey)}
        assert shown["Next log"] == "x"


async def test_a_launch_enables_and_disables_keys_in_place_and_they_act_as_shown() -> None:
    app = DdpApp(local_spec("--sleep", "60", nodes=2))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        await pilot.pause()
        keys = {key.action: key for key in screen.query(FooterKey)}
        assert not keys["launch"].has_class("-disabled")
        assert keys["teardown"].has_class("-disabled")

        await pilot.press("l")
        await wait_for(pilot, lambda: screen.job_active, "the run to start")
        await pilot.pause()
        after = {key.action: key for key in screen.query(FooterKey)}
        assert after == keys  # the same widgets: nothing rebuilt
        assert keys["launch"].has_class("-disabled") and keys["launch"]._disabled
        assert not keys["teardown"].has_class("-disabled") and not keys["teardown"]._disabled

        await pilot.click(keys["teardown"])  # a click on the key does what it shows
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: screen.summary is not None, "the teardown", timeout=60)
        await pilot.pause()
        ended = {key.action: key for key in screen.query(FooterKey)}  # more keys: rebuilt
        assert not ended["launch"].has_class("-disabled")
        assert ended["teardown"].has_class("-disabled")


async def test_lines_arriving_lay_out_nothing_but_move_the_end_and_the_scrollbar() -> None:
    """Textual's `virtual_size` lays out the whole screen on every change; views that grow
    on every tick of a flood must not (only their scrollbars depend on it)."""
    app = DdpApp(local_spec(nodes=3))
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        view = deck.active_view
        deck.append(lines("local0", 300) + lines("local1", 300))
        await pilot.pause()  # the first scrollbar comes with a layout
        layouts: list[object] = []
        app.screen.screen_layout_refresh_signal.subscribe(view, layouts.append)
        for i in range(20):
            deck.append(lines("local0", 10, 300 + 10 * i) + lines("local1", 10, 300 + 10 * i))
            await pilot.pause()
        assert layouts == []
        assert view.following and end_shows(view) and view.line_count == 500
        assert view.vertical_scrollbar.window_virtual_size == 500
        assert view.vertical_scrollbar.position == view.scroll_y

        await pilot.press("right_square_bracket")  # the hidden view grew too: it opens at its end
        await pilot.pause()
        local1 = deck.active_view
        assert local1.node == "local1" and end_shows(local1)
        assert local1.vertical_scrollbar.window_virtual_size == 500


async def test_lines_for_hidden_views_arrange_nothing() -> None:
    """A hidden view that gets lines asks for no repaint: it is not on screen, and Textual
    would arrange every widget again for it (a widget it cannot find invalidates its map)."""
    app = DdpApp(local_spec(nodes=3))
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        deck.append(lines("local0", 100))
        await pilot.pause()
        compositor = app.screen._compositor
        arranged: list[object] = []
        arrange = compositor._arrange_root

        def spy(*args: Any, **kwargs: Any) -> Any:
            arranged.append(args)
            return arrange(*args, **kwargs)

        compositor._arrange_root = spy  # type: ignore[method-assign]
        for i in range(10):
            deck.append(lines("local1", 50, 50 * i) + lines("local2", 50, 50 * i))
            await pilot.pause()
        assert arranged == []
        assert deck.pane("local1").line_count == 500  # type: ignore[union-attr]
        shown = deck.active_view.line_count
        deck.append(lines("local0", 5, 100))  # the shown view's lines do draw
        await pilot.pause()
        assert deck.active_view.line_count == shown + 5 and end_shows(deck.active_view)


async def test_a_node_s_new_state_marks_its_tab_without_a_layout() -> None:
    """Every node's tab changes its mark several times in a launch; a new mark redraws the
    tab bar's one row without laying out the screen, and a failed node's tab shows it."""
    app = DdpApp(local_spec(nodes=3))
    async with app.run_test(size=SIZE) as pilot:
        deck = app.job_screen.logs
        bar = deck.tab_bar
        deck.show_state("local1", NodeState.CONNECTING, None)
        await pilot.pause()
        assert bar.labels[1] == "local1 …"
        layouts: list[object] = []
        app.screen.screen_layout_refresh_signal.subscribe(deck, layouts.append)
        for state in (NodeState.LAUNCHED, NodeState.RUNNING, NodeState.FAILED):
            deck.show_state("local1", state, None)
            await pilot.pause()
        assert layouts == []
        assert bar.labels[1] == "local1 ✗"
        assert "local1 ✗" in str(bar.render())
        failed = bar.get_visual_style("log-tabs--failed").foreground
        drawn = bar.render()
        span = bar.span_of(1)
        assert span is not None and failed is not None
        assert any(
            s.start <= span.start + 1 < s.end and getattr(s.style, "foreground", None) == failed
            for s in drawn.spans
        ), "the failed node's tab is drawn in the failure colour"
