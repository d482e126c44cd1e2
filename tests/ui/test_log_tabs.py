"""LogTabBar: the one-row tab bar of the log deck, at any number of logs and any width."""

from __future__ import annotations

from textual import events, on

from ddptui.ui.widgets.logs.log_deck import NodeLogDeck
from ddptui.ui.widgets.logs.log_tabs import LogTabBar
from tests.ui.widget_host import WidgetHost

LABELS = [f"node{i:03d}" for i in range(512)] + ["all nodes"]


class ClickHost(WidgetHost):
    def __init__(self, widget: LogTabBar) -> None:
        super().__init__(widget)
        self.selected: list[int] = []

    @on(LogTabBar.Selected)
    def _selected(self, event: LogTabBar.Selected) -> None:
        self.selected.append(event.index)


def shown(bar: LogTabBar) -> list[int]:
    return [span.index for span in bar.spans if span.index is not None]


async def test_every_tab_shows_when_they_fit_and_none_are_said_to_be_cut() -> None:
    bar = LogTabBar(["local0", "local1", "all nodes"])
    async with WidgetHost(bar).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not bar.cut
        assert shown(bar) == [0, 1, 2]
        assert str(bar.render()).startswith(" local0  local1  all nodes ")
        assert "›" not in str(bar.render()) and "‹" not in str(bar.render())


async def test_the_active_tab_stays_in_sight_and_the_markers_count_the_rest() -> None:
    bar = LogTabBar(LABELS)
    async with WidgetHost(bar).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert bar.cut
        for active in (0, 7, 8, 300, 299, 511, 512, 3):
            bar.active = active
            await pilot.pause()
            row = str(bar.render())
            indices = shown(bar)
            assert active in indices, (active, indices)
            assert indices == list(range(indices[0], indices[-1] + 1))
            assert len(row) <= 80, row
            left, right = indices[0], len(LABELS) - 1 - indices[-1]
            assert row.startswith(f"‹{left} ") if left else row.startswith(" node000 ")
            assert row.endswith(f"{right}›") if right else "›" not in row
            assert f" {LABELS[active]} " in row


async def test_a_click_names_its_tab_and_a_marker_pages_without_changing_the_active() -> None:
    bar = LogTabBar(LABELS)
    host = ClickHost(bar)
    async with host.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        first_page = shown(bar)
        second = bar.span_of(2)
        assert second is not None
        await pilot.click(LogTabBar, offset=(second.start + 1, 0))
        assert host.selected == [2]

        await pilot.click(LogTabBar, offset=(79, 0))  # the `N›` marker: the next page
        await pilot.pause()
        assert shown(bar)[0] == first_page[-1] + 1 and bar.active == 0
        await pilot.click(LogTabBar, offset=(0, 0))  # `‹N`: back to the first page
        await pilot.pause()
        assert shown(bar) == first_page
        assert host.selected == [2]


async def test_the_mouse_wheel_pages_the_tabs_without_changing_the_active() -> None:
    bar = LogTabBar(LABELS)
    async with WidgetHost(bar).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        first_page = shown(bar)
        bar.post_message(events.MouseScrollDown(bar, 5, 0, 0, 1, 0, False, False, False))
        await pilot.pause()
        assert shown(bar)[0] == first_page[-1] + 1 and bar.active == 0
        bar.post_message(events.MouseScrollUp(bar, 5, 0, 0, -1, 0, False, False, False))
        await pilot.pause()
        assert shown(bar) == first_page and bar.active == 0


async def test_the_deck_at_512_nodes_switches_with_the_bar_and_clicks_show_a_log() -> None:
    deck = NodeLogDeck(LABELS[:-1])
    async with WidgetHost(deck).run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        deck.step(-1)  # before the first node: the merged view, the bar's last tab
        await pilot.pause()
        assert deck.active_node is None and deck.tab_bar.active == 512
        assert deck.merged_view.display and not deck.pane("node000").display  # type: ignore[union-attr]
        deck.step(1)
        deck.step(1)
        await pilot.pause()
        assert deck.active_node == "node001" and deck.tab_bar.active == 1
        third = deck.tab_bar.span_of(3)
        assert third is not None
        await pilot.click("#log-tabs", offset=(third.start + 1, 0))
        await pilot.pause()
        assert deck.active_node == "node003" and deck.active_view.has_focus
        assert [view for view in deck.views if view.display] == [deck.active_view]
