"""The run outcome panel's teardown proof: a line per node on a small job, the clean nodes as
one hostlist on a large one, and no layout of the screen for a report that adds no line."""

from __future__ import annotations

from ddptui.core.events import TeardownReport
from ddptui.ui.widgets.run_outcome import NODE_LINES, RunOutcome

from .conftest import SIZE
from .widget_host import WidgetHost


def clean(node: str) -> TeardownReport:
    return TeardownReport(node, True, (), "3 process(es) found")


async def test_a_small_job_has_a_line_per_node() -> None:
    outcome = RunOutcome()
    async with WidgetHost(outcome).run_test(size=SIZE):
        for node in ("local0", "local1"):
            outcome.add_report(clean(node))
    lines = outcome.describe().plain.splitlines()
    assert "  local0 ✓ clean — 3 process(es) found" in lines
    assert "  local1 ✓ clean — 3 process(es) found" in lines


async def test_a_large_job_lists_its_clean_nodes_as_one_hostlist_and_each_dirty_one() -> None:
    outcome = RunOutcome()
    async with WidgetHost(outcome).run_test(size=SIZE):
        for i in range(1, 65):
            if i in (17, 40):
                outcome.add_report(TeardownReport(f"node{i}", False, (4242, 4243), "2 left"))
            else:
                outcome.add_report(clean(f"node{i}"))
    lines = outcome.describe().plain.splitlines()
    assert "  ✓ clean node[1-16,18-39,41-64] (62 nodes)" in lines
    assert "  node17 ✗ leftover pids 4242 4243 — 2 left" in lines
    assert "  node40 ✗ leftover pids 4242 4243 — 2 left" in lines
    assert not [line for line in lines if line.startswith("  node") and "✓" in line]
    assert not outcome.all_clean


async def test_a_report_that_adds_no_line_lays_out_nothing() -> None:
    outcome = RunOutcome()
    async with WidgetHost(outcome).run_test(size=SIZE) as pilot:
        for i in range(NODE_LINES + 1):
            outcome.add_report(clean(f"node{i}"))
        await pilot.pause()
        layouts: list[object] = []
        pilot.app.screen.screen_layout_refresh_signal.subscribe(outcome, layouts.append)
        for i in range(NODE_LINES + 1, 64):
            outcome.add_report(clean(f"node{i}"))
            await pilot.pause()
        assert layouts == []
        assert "✓ clean node[0-63] (64 nodes)" in str(outcome.render())

        outcome.add_report(TeardownReport("node64", False, (99,), ""))  # a line more
        await pilot.pause()
        assert layouts
        assert "node64 ✗ leftover pids 99" in str(outcome.render())
