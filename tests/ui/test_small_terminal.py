"""The console at 80x24 can be found out: the footer's pages hold every key it shows (the view
keys too), the side panels scroll and open full screen, the launch prompt names its key, and
the help fits 80 columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.cells import cell_len
from textual.pilot import Pilot
from textual.widgets import DataTable
from textual.widgets._footer import FooterKey

from ddptui.core.events import MetricSampled
from ddptui.core.monitor.cycles import CycleMember, RestartCycle
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.help import HelpScreen
from ddptui.ui.screens.job import JobScreen
from ddptui.ui.screens.panel_screen import PanelScreen
from ddptui.ui.widgets.footer import SteadyFooter
from ddptui.ui.widgets.side_panel import SidePanel

from .conftest import local_spec
from .replay import T0, feed, running_events
from .screens import SMALL, crashed, fixed_app, settle

VIEW_KEYS = {"E": "Jump to error", "J": "Go to rank", "V": "Speed", "r": "Restarts"}


def round_(index: int) -> RestartCycle:
    """A rendezvous round of two nodes, the first or one after local1 left."""
    members = tuple(CycleMember(f"local{n}", n, (n,)) for n in range(2))
    cause = "start" if index == 0 else "local1 left"
    return RestartCycle(index, T0 + index, 2, members, cause, restarts=index, max_restarts=9)


def screen_text(app: DdpApp) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def footer_row(footer: SteadyFooter) -> dict[str, FooterKey]:
    """The keys the footer's row shows now, by description (the page key's `more i/n` too)."""
    keys = footer.query(FooterKey)
    return {k.description: k for k in keys if k.display and not k.has_class("-command-palette")}


async def footer_pages(pilot: Pilot[Any], footer: SteadyFooter) -> list[dict[str, FooterKey]]:
    """Every page of the footer's keys, flipped with the page key round to the first again;
    each page fits beside the command palette's key and says which page it is."""
    pages: list[dict[str, FooterKey]] = []
    for _ in range(footer.pages):
        row = footer_row(footer)
        more = [k for d, k in row.items() if d.startswith("more ")]
        assert [k.description for k in more] == [f"more {len(pages) + 1}/{footer.pages}"]
        assert more[0].key_display == "."
        keys = {d: k for d, k in row.items() if not d.startswith("more ")}
        assert keys, "a page with no key"
        palette = next(k for k in footer.query(FooterKey) if k.has_class("-command-palette"))
        right = max(k.region.right for k in row.values())
        assert right <= palette.region.x, f"page {len(pages) + 1} runs under the palette"
        pages.append(keys)
        await pilot.press("full_stop")
        await pilot.pause()
    assert footer.page == 0  # round again
    return pages


async def test_the_footer_pages_through_every_key_the_view_keys_among_them() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await settle(pilot)
        footer = screen.footer
        offered = {k.description: k.key_display for k in footer._paged}
        pages = await footer_pages(pilot, footer)
        assert len(pages) > 1
        seen = [d for page in pages for d in page]
        assert sorted(seen) == sorted(offered)  # every key on exactly one page
        for key, does in {**VIEW_KEYS, "^k": "Kill node", "o": "Panel full screen"}.items():
            assert offered.get(does) == key, (does, offered)

        await pilot.resize_terminal(200, 40)  # more room: fewer pages, the same keys
        await pilot.pause()
        wide = await footer_pages(pilot, footer)
        assert len(wide) < len(pages)
        assert sorted(d for page in wide for d in page) == sorted(offered)


async def test_the_page_key_is_remappable_and_the_footer_says_the_new_key(tmp_path: Path) -> None:
    keymap = tmp_path / "keys.toml"
    keymap.write_text('"footer.page" = "ctrl+g"\n')
    app = DdpApp(local_spec(), keymap_path=keymap)
    async with app.run_test(size=SMALL) as pilot:
        footer = app.job_screen.footer
        await settle(pilot)
        more = next(k for d, k in footer_row(footer).items() if d.startswith("more "))
        assert more.key_display == "^g"
        await pilot.press("ctrl+g")
        await pilot.pause()
        assert footer.page == 1


async def test_metrics_key_joins_the_pages_once_a_metric_shows() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await settle(pilot)
        assert "Metrics" not in {k.description for k in screen.footer._paged}
        screen.relay.emit(MetricSampled(0, 1, {"loss": 2.3}, ts=T0))  # a rank's first metric
        await pilot.pause(0.2)  # the next flush sees it
        await settle(pilot)
        assert "Metrics" in {k.description for k in screen.footer._paged}


async def test_the_root_cause_scrolls_in_the_side_and_opens_full_screen() -> None:
    app = fixed_app()
    async with app.run_test(size=SMALL) as pilot:
        await crashed(pilot)
        screen = app.job_screen
        panel = screen.root_cause
        assert panel.shown
        full = panel.full_text().plain.splitlines()
        assert panel.max_scroll_y > 0  # clipped in the side: 8 rows of a long story
        assert full[-1].strip() not in "\n".join(screen_text(app))

        panel.focus()
        await pilot.press("pagedown")
        await pilot.pause()
        assert panel.scroll_y > 0  # the panel's own keys scroll it
        await pilot.press("home")
        await pilot.pause()
        assert panel.scroll_y == 0

        screen.logs.active_view.focus()  # no panel focused: `o` opens the root cause
        await pilot.press("o")
        await settle(pilot)
        assert isinstance(app.screen, PanelScreen) and app.screen.panel is panel
        view = app.screen
        assert view.scroll.border_title == "Root cause"
        assert view.scroll.region.width == SMALL[0]  # the terminal's width, not the side's
        shown = "\n".join(screen_text(app))
        beyond = full[panel.scrollable_content_region.height + 2].strip()  # past the side's
        assert beyond and beyond[:40] in shown
        await pilot.press("end")
        await pilot.pause()
        assert view.scroll.scroll_y == view.scroll.max_scroll_y > 0
        last = full[-1].strip()
        assert last[:40] in "\n".join(screen_text(app))  # the story's end, read at last
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, JobScreen)


async def test_the_restarts_panel_scrolls_and_its_full_screen_follows_new_rounds() -> None:
    app = fixed_app()
    async with app.run_test(size=SMALL) as pilot:
        screen = app.job_screen
        await settle(pilot)
        for index in range(6):
            screen.cycles.show_cycle(round_(index))
        await settle(pilot)
        panel = screen.cycles
        assert panel.shown and panel.max_scroll_y > 0
        panel.focus()
        await pilot.press("o")  # the focused panel, not the root cause
        await settle(pilot)
        assert isinstance(app.screen, PanelScreen) and app.screen.panel is panel
        assert "round 5" in app.screen.body.content.plain  # type: ignore[union-attr]
        screen.cycles.show_cycle(round_(6))
        await pilot.pause(0.7)  # the full-screen view reads the panel again twice a second
        assert "round 6" in app.screen.body.content.plain  # type: ignore[union-attr]


async def test_every_side_panel_is_focusable_and_says_its_whole_text() -> None:
    app = fixed_app()
    async with app.run_test(size=SMALL) as pilot:
        await crashed(pilot)
        screen = app.job_screen
        await pilot.press("V", "r")
        await settle(pilot)
        for panel in screen.side_panels:
            assert isinstance(panel, SidePanel) and panel.can_focus
        shown = [p for p in screen.side_panels if p.shown]
        assert {p.panel_title for p in shown} >= {"Root cause", "Restarts", "Speed"}
        for panel in shown:
            panel.focus()
            await pilot.pause()
            assert app.focused is panel
            assert panel.full_text().plain.strip()


async def test_the_launch_prompt_names_the_key_that_launches() -> None:
    for keymap, key in ((None, "l"), ("vim", "R")):
        app = DdpApp(local_spec(), keymap_path=keymap)
        async with app.run_test(size=SMALL) as pilot:
            await settle(pilot)
            screen = app.job_screen
            assert f"press {key} to launch" in "\n".join(screen_text(app))
            feed(screen, running_events())  # launched: the prompt goes
            await settle(pilot)
            assert "to launch" not in screen.outcome.describe().plain

    app = DdpApp(local_spec(), read_only=True)  # nothing launches: no prompt
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        assert "to launch" not in app.job_screen.outcome.describe().plain


async def test_help_fits_80_columns() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one(DataTable)
        assert table.region.right <= SMALL[0]
        assert table.virtual_size.width <= table.scrollable_content_region.width  # no side scroll
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        widths = [column.get_render_width(table) for column in table.columns.values()]
        assert widths[0] >= max(cell_len(str(r[0])) for r in rows)  # every key whole
        assert widths[2] >= max(cell_len(str(r[2])) for r in rows)  # every binding id whole
        headings = [str(r[1]) for r in rows if not str(r[2])]
        assert {"console", "side panel", "panel full screen"} <= set(headings)  # not a column
        does = widths[1] - 2 * table.cell_padding
        for key, row in table.rows.items():  # a long description wraps, whole, in its row
            text = str(table.get_row(key)[1])
            assert row.height >= -(-cell_len(text) // does), (text, row.height)
        shown = "\n".join(screen_text(app))
        assert "Binding id" in shown and "app.quit" in shown
