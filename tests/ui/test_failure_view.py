"""A failed run: red cells with exit code or signal, the root-cause panel, jump to error."""

from __future__ import annotations

from ddptui.core.events import Diagnosis, RankChanged, RankState
from ddptui.core.monitor.patterns import PEER_LOST, TRACEBACK, recognise
from ddptui.ui.app import DdpApp

from .conftest import SIZE, local_spec
from .replay import crash_events, feed, replay_events


async def test_failed_ranks_and_the_root_cause_panel() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, crash_events())
        await pilot.pause()
        cell = screen.grid.cell("local0", 1)
        assert cell is not None and cell.look == "failed"
        assert cell.render() == "r1 ✗1◆"  # its exit, and the mark of the rank the story blames
        victims = [screen.grid.cell("local0", 0), screen.grid.cell("local1", 0)]
        assert [c.render() for c in victims if c is not None] == ["r0 ✗1", "r2 ✗1"]
        panel = screen.root_cause
        assert panel.has_class("-shown")
        text = panel.describe().plain
        rows = text.splitlines()
        # the story's lead first: kind and rank, whose and whether to restart, what happened
        assert rows[0] == "▶ crash: rank 1 on local0"
        assert (
            rows[1] == "  initiating · the job's code · fix it first: a restart fails the same way"
        )
        assert rows[2] == "  RuntimeError: envcheck: deliberate failure on rank 1 (--fail-rank)"
        assert "Failures · as torchrun's agents reported them\n✗ rank 1 on local0" in text
        assert f"\n  {rows[0][2:]} — RuntimeError: envcheck" in screen.outcome.describe().plain
        assert "error file /tmp/torchelastic_" in text
        assert text.index("rank 2 on local1") < text.index("rank 0 on local0")
        assert "then 3 ranks failed because of it" in text  # the culprit, then its victims
        assert "exit 1 · a peer closed the connection" in text
        assert "E: jump to the first error line" in text


async def test_jump_to_error_goes_to_the_root_cause_rank_first() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, crash_events())
        await pilot.pause()
        await pilot.press("E")
        await pilot.pause()
        view = screen.logs.active_view
        assert view.node == "local0"
        assert view.target is not None and view.target.rank == 1
        assert view.target.text == "Traceback (most recent call last):"
        assert not view.following
        row = view.target_row
        assert row is not None and view.scroll_y <= row < view.scroll_y + view.size.height

        await pilot.press("E")  # the next failure: rank 2 on local1, in a tab not shown yet
        await pilot.pause()
        view = screen.logs.active_view
        assert view.node == "local1"
        assert view.target is not None and view.target.rank == 2
        row = view.target_row
        assert row is not None and view.scroll_y <= row < view.scroll_y + view.size.height

        # the operator chooses rank 3
        await pilot.click(screen.grid, offset=screen.grid.cell_offset("local1", 1))
        await pilot.press("E")
        target = screen.logs.active_view.target
        assert target is not None and target.rank == 3


async def test_jump_clears_a_filter_that_hides_the_line() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        feed(screen, crash_events())
        await pilot.press("f", *"rank:0", "enter")
        await pilot.press("E")
        await pilot.pause()
        view = screen.logs.active_view
        assert not view.user_filter.active
        assert view.target is not None and view.target.rank == 1


async def test_sigkill_shows_the_signal_name() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        events = replay_events(
            {"local0": "sigkill_node0.log", "local1": "sigkill_node1.log"},
            {"local0": 1, "local1": -15},
        )
        feed(screen, events)
        await pilot.pause()
        cell = screen.grid.cell("local0", 1)
        assert cell is not None and cell.render() == "r1 ✗SIGKILL◆"
        panel = screen.root_cause.describe().plain
        assert panel.startswith("▶ crash: rank 1 on local0\n") and "SIGKILL" in panel
        assert "rank 1 on local0" in cell.tooltip and cell.blamed is not None
        await pilot.press("E")  # no traceback: the agent's line that saw it die
        target = screen.logs.active_view.target
        assert target is not None and "failed (exitcode: -9) local_rank: 1" in target.text


async def test_hung_straggler_and_restarts_show_in_the_grid() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        grid = app.job_screen.grid
        grid.show_rank(RankChanged(1, "local0", 1, RankState.RUNNING, straggler=True, restarts=1))
        grid.show_rank(RankChanged(2, "local1", 0, RankState.HUNG))
        await pilot.pause()
        slow = grid.cell("local0", 1)
        hung = grid.cell("local1", 0)
        assert slow is not None and hung is not None
        assert slow.look == "straggler" and slow.render() == "r1 ▶slow"
        assert hung.look == "hung"
        assert grid.restarts()["local0"] == 1


async def test_diagnoses_name_the_rank_with_its_own_error_before_those_that_lost_a_peer() -> None:
    """While torchrun restarts the workers there is no failure record, only each rank's
    output: the victims' lines came first, yet the rank whose own error it was leads."""
    gloo = (
        "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
        "Connection closed by peer [127.0.0.1]:29831"
    )
    lost = recognise(gloo, seq=7)
    assert lost is not None and lost.kind == PEER_LOST
    own = Diagnosis(TRACEBACK, "RuntimeError: envcheck: deliberate failure on rank 1 (--fail-rank)")
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        panel = app.job_screen.root_cause
        for rank in (2, 3):  # local1's ranks lost their peer and said so first
            panel.show_rank(
                RankChanged(rank, "local1", rank - 2, RankState.RUNNING, diagnoses=(lost,))
            )
        panel.show_rank(RankChanged(1, "local0", 1, RankState.RUNNING, diagnoses=(own,)))
        await pilot.pause()
        text = panel.describe().plain
        assert text.startswith("Diagnoses\n  rank 1 on local0: RuntimeError: envcheck")
        assert (
            text.index("rank 1 on local0")
            < text.index("rank 2 on local1")
            < text.index("rank 3 on local1")
        )


async def test_the_verdict_and_a_mismatch_are_in_the_root_cause_panel() -> None:
    from ddptui.core.diagnose.audit import CollectiveMismatch, MismatchKind
    from ddptui.core.diagnose.audit_watch import MismatchReport

    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        screen = app.job_screen
        mismatch = CollectiveMismatch(
            "all_reduce", MismatchKind.SIZE, {0: "all_reduce [4] Float", 1: "all_reduce [8] Float"},
            "0", 6, (1,), "rank 1 passed all_reduce [8] Float, the others all_reduce [4] Float",
        )  # fmt: skip
        feed(screen, [*crash_events(), MismatchReport(mismatch, "failure")])
        await pilot.pause()
        text = screen.root_cause.describe().plain
        assert "Mismatch rank 1: size mismatch in all_reduce #6 of group 0" in text
        assert "Verdict rank 1 on local0 · initiating · exception" in text
        assert "fix it first" in text or "restart" in text
