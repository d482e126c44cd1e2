"""`--notify CMD` in the console: the session's own process runs the command for a real crashed
run (trainer/envcheck.py), and a command that fails is a warning on the 80x24 screen."""

from __future__ import annotations

import json
from pathlib import Path

from ddptui.ui.app import DdpApp

from .conftest import job_screen, local_spec, wait_for, wait_no_tagged_pids

RUN_TIMEOUT = 180.0


async def test_a_failing_alert_is_a_warning_on_the_screen(tmp_path: Path) -> None:
    told_file = tmp_path / "told.jsonl"
    notify = f"cat >> {told_file}; echo 'pager unreachable' >&2; exit 1"
    app = DdpApp(local_spec("--fail-rank", "1", notify=notify))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(pilot, lambda: screen.summary is not None, "the run's end", RUN_TIMEOUT)
        assert screen.summary is not None and not screen.summary.ok
        (told,) = [json.loads(line) for line in told_file.read_text().splitlines()]
        assert told["notify"] == "ended" and told["run_id"] == screen.summary.run_id
        assert told["incident"]["kind"] == "crash" and told["incident"]["blamed"] == [1]
        warnings = [n.message for n in screen.outcome.notices if n.level == "warning"]
        assert len(warnings) == 1 and warnings[0].startswith("notify: ended (incident ")
        assert warnings[0].endswith("not told: the command exited 1: pager unreachable")
        assert warnings[0] in screen.outcome.describe().plain
        assert wait_no_tagged_pids(screen.summary.run_id) == []
        await pilot.press("q")
