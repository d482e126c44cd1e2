"""The console's collector: raised young and middle thresholds while the app runs, as they
were after."""

from __future__ import annotations

import gc

from ddptui.core.session.process import GC_CONSOLE_THRESHOLDS
from ddptui.ui.app import DdpApp

from .conftest import SIZE, local_spec


async def test_the_app_raises_the_young_threshold_while_it_runs_and_restores_it() -> None:
    before = gc.get_threshold()
    young, middle = GC_CONSOLE_THRESHOLDS
    assert before[0] < young and before[1] < middle  # Python's defaults: else this proves nothing
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert gc.get_threshold() == (young, middle, before[2])
    assert gc.get_threshold() == before
