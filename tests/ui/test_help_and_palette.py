"""The help screen lists every binding with its current key; the palette lists every action."""

from __future__ import annotations

from textual.widgets import DataTable

from ddptui.ui.app import DdpApp
from ddptui.ui.keymap import binding_catalogue
from ddptui.ui.screens.help import HelpScreen

from .conftest import SIZE, local_spec


async def test_help_lists_every_binding_with_its_key() -> None:
    app = DdpApp(local_spec(), keymap_path="vim")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        table = app.screen.query_one(DataTable)
        rows = [table.get_row_at(i) for i in range(table.row_count)]
        by_id = {str(row[2]): str(row[0]) for row in rows}
        assert set(binding_catalogue(DdpApp.binding_scopes())) <= set(by_id)
        assert by_id["job.launch"] == "R"
        assert by_id["logs.scroll_down"] == "j/↓"
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_command_palette_offers_every_action() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for expected in (
            "Launch the job (l)",
            "Tear down the job (t)",
            "Detach from the job (d)",
            "Next node log (])",
            "Previous node log ([)",
            "Help: keys (?/f1)",
            "Quit (q)",
            "Go to rank (J)",
            "Commands (c)",
            "torchrun/torchft lines on/off (A)",
            "Fold repeats on/off (z)",
        ):
            assert expected in titles
        assert titles.count("Quit (q)") == 1
        assert "Quit" not in titles

        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"help: keys")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert isinstance(app.screen, HelpScreen)
