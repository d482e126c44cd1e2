"""The console's torchft run: a real local job of two replica groups (the Lighthouse and a
torchrun each, gloo), a group killed with a key behind its confirmation, the quorum panel
telling its id, each group's step and lag, and the group coming back behind and healing;
the run green and every process gone, the Lighthouse too. At 80x24, the panel still fits."""

from __future__ import annotations

from ddptui.core.job.resolve import resolve_job
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.confirm import ConfirmScreen

from .conftest import job_screen, wait_for, wait_no_tagged_pids

RUN_TIMEOUT = 300.0


async def test_kill_a_replica_group_from_the_console_and_see_it_heal() -> None:
    spec = resolve_job(
        {
            "ft_replicas": 2,
            "nproc_per_node": 1,
            "hang_timeout": 0,
            "script_args": ("--steps", "60", "--step-time", "0.25"),
        }
    )
    app = DdpApp(spec)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = job_screen(app)
        panel = screen.cycles

        def group_steps() -> dict[str, int]:
            quorum = panel.quorum
            return {m.replica: m.step for m in quorum.members} if quorum else {}

        await pilot.press("l")
        await wait_for(
            pilot,
            lambda: len(group_steps()) == 2 and min(group_steps().values()) >= 5,
            "both groups in the quorum, stepping",
            RUN_TIMEOUT,
        )
        assert panel.has_class("-shown") and panel.border_title == "Quorum (torchft)"
        drawn = panel.full_text().plain
        assert f"quorum {panel.quorum.quorum_id}" in drawn  # type: ignore[union-attr]
        assert "ft_0" in drawn and "ft_1" in drawn and "lag" in drawn
        assert screen.session is not None
        run_id = screen.session.run_id
        screen.go_to("local1")
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        before = len(panel.notes)
        await pilot.press("y")

        def came_back() -> list[str]:
            later = [n for _, n in panel.notes[before:]]
            return [n for n in later if "ft_1 joined" in n or "ft_1 started again" in n]

        await wait_for(pilot, lambda: bool(came_back()), "group 1 back", RUN_TIMEOUT)
        back = came_back()[0]
        assert "steps behind: heals from a peer" in back, panel.notes
        assert "ft_1" in panel.full_text().plain
        await wait_for(pilot, lambda: not screen.job_active, "the run to end", RUN_TIMEOUT)
        assert screen.summary is not None and screen.summary.ok, screen.summary
        assert screen.summary.detail.startswith("torchft: finished on 2 of 2 replica group(s)")
        assert [r.rank for r in screen.summary.ranks] == [0, 1]
        assert set(screen.outcome.reports) == {"local0", "local1"}
        assert screen.outcome.all_clean
        assert wait_no_tagged_pids(run_id) == []  # the Lighthouse included
