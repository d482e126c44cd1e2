"""The console's elastic run: a node's agent killed with a key (behind its confirmation) on a
real local run of three pseudo-nodes (`--nodes 2:3`), the job going on at two, the restarts
panel telling the round; and read-only mode, where every action that changes the job is
hidden."""

from __future__ import annotations

from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.confirm import ConfirmScreen
from tests.cases import ROOT

from .conftest import SIZE, job_screen, wait_for, wait_no_tagged_pids

RUN_TIMEOUT = 300.0
CHANGING = ("launch", "teardown", "detach", "take_stacks", "node_action")


def elastic_spec(steps: int = 30) -> object:
    return make_spec(
        script=str(ROOT / "trainer" / "elastic_ddp.py"),
        script_args=("--steps", str(steps), "--step-time", "0.5"),
        nodes=3,
        min_nodes=2,
        max_restarts=3,
        nproc_per_node=1,
        hang_timeout=0,
        rdzv_conf="last_call_timeout=2",
    )


async def test_read_only_hides_every_action_that_changes_the_job() -> None:
    app = DdpApp(elastic_spec(), read_only=True)  # type: ignore[arg-type]
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        for action in CHANGING:
            assert screen.check_action(action, ()) is False, action
        assert app.check_action("edit_job", ()) is False
        assert app.check_action("preflight", ()) is False
        shown = {b.binding.id for b in app.active_bindings.values() if b.enabled}
        for hidden in (
            "job.launch",
            "elastic.kill_node",
            "elastic.drain",
            "elastic.kill_rank",
            "elastic.kill_group",
        ):
            assert hidden not in shown, hidden
        assert "elastic.cycles" in shown  # looking is allowed
        # the job says it is elastic: the least it goes on with and the most it asks for
        from ddptui.ui.widgets.job_panel import describe_job, describe_job_line

        spec = screen.spec
        assert describe_job_line(spec).plain.startswith("2:3×1 = 2..3 ranks · ")
        assert "2:3 node(s) × 1 process(es) per node = world size 2..3" in describe_job(spec).plain
        await pilot.press("l")
        await pilot.pause(0.3)
        assert screen.session is None  # the key did nothing
        await screen.run_binding("job.launch")  # nor does `:launch`
        await pilot.pause(0.3)
        assert screen.session is None
    writable = DdpApp(elastic_spec())  # type: ignore[arg-type]
    async with writable.run_test(size=SIZE):
        assert job_screen(writable).check_action("launch", ()) is True


async def test_kill_a_node_from_the_console_and_the_job_goes_on() -> None:
    app = DdpApp(elastic_spec())  # type: ignore[arg-type]
    async with app.run_test(size=SIZE) as pilot:
        screen = job_screen(app)
        await pilot.press("l")
        await wait_for(
            pilot,
            lambda: len({r.rank for r in screen.ranks.values() if r.state == "running"}) == 3,
            "every rank running",
            RUN_TIMEOUT,
        )
        assert screen.session is not None
        run_id = screen.session.run_id
        screen.go_to("local2")
        await pilot.press("ctrl+k")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await wait_for(  # a round is told as each agent reports in: both have here
            pilot,
            lambda: 1 in screen.cycles.cycles and len(screen.cycles.cycles[1].nodes) == 2,
            "a second round of two nodes",
            RUN_TIMEOUT,
        )
        second = screen.cycles.cycles[1]
        assert set(second.nodes) == {"local0", "local1"} and second.world_size == 2
        assert second.cause == "node local2 agent killed by the operator (fault injection)"
        assert screen.cycles.has_class("-shown")
        await wait_for(pilot, lambda: not screen.job_active, "the run to end", RUN_TIMEOUT)
        assert screen.summary is not None
        assert [c.index for c in screen.summary.cycles][:2] == [0, 1]
        assert set(screen.outcome.reports) == {"local0", "local1", "local2"}
        assert screen.outcome.all_clean
        assert wait_no_tagged_pids(run_id) == []
