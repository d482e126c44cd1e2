"""The console's collector: raised young and middle thresholds while the app runs, as they
were after."""

from __future__ import annotations

import gc

from ddptui.core.session.process import GC_MIDDLE_THRESHOLD, GC_YOUNG_THRESHOLD
from ddptui.ui.app import DdpApp

from .conftest import SIZE, local_spec


async def test_the_app_raises_the_young_threshold_while_it_runs_and_restores_it() -> None:
    before = gc.get_threshold()
    # Python's defaults here, else this proves nothing
    assert before[0] < GC_YOUNG_THRESHOLD and before[1] < GC_MIDDLE_THRESHOLD
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, GC_MIDDLE_THRESHOLD, before[2])
    assert gc.get_threshold() == before
