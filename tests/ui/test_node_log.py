"""NodeLogPane follows new lines until the operator scrolls away, and the relay batches lines."""

from __future__ import annotations

from ddptui.core.events import NodeLine, RankChanged, RankState
from ddptui.ui.app import DdpApp
from ddptui.ui.messages import RankUpdate
from ddptui.ui.relay import SessionRelay, format_line

from .conftest import SIZE, local_spec


async def test_log_pane_follows_until_scrolled_up() -> None:
    app = DdpApp(local_spec())
    async with app.run_test(size=SIZE) as pilot:
        pane = app.job_screen.logs.pane("local0")
        assert pane is not None
        for batch in range(10):  # long lines: the horizontal scrollbar appears late
            pane.append_batch([f"[r0] batch {batch} line {i} " + "x" * 300 for i in range(25)])
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        assert pane.line_count == 250
        assert pane.scroll_y == pane.max_scroll_y > 0

        pane.focus()
        await pilot.press("up", "up")
        assert not pane.following
        where = pane.scroll_y
        pane.append_batch(["more"] * 50)
        await pilot.pause(0.3)
        assert pane.scroll_y == where  # the operator's place is kept

        await pilot.press("end")
        await pilot.pause(0.3)
        assert pane.following
        pane.append_batch(["yet more"] * 50)
        await pilot.pause(0.3)
        assert pane.scroll_y == pane.max_scroll_y


def test_relay_buffers_lines_and_posts_the_rest() -> None:
    posted: list[object] = []
    relay = SessionRelay(posted.append, buffer_lines=3)
    relay.emit(NodeLine("n0", "agent says hi"))
    for i in range(5):
        relay.emit(NodeLine("n0", f"line {i}", rank=3, local_rank=1))
    relay.emit(NodeLine("n1", "other", rank=0, local_rank=0))
    relay.emit(RankChanged(3, "n0", 1, RankState.RUNNING))
    assert len(posted) == 1
    assert isinstance(posted[0], RankUpdate)

    drained = relay.drain({"n0"})
    assert drained == {"n0": (["[r3] line 2", "[r3] line 3", "[r3] line 4"], 3)}
    assert relay.drain() == {"n1": (["[r0] other"], 0)}
    assert relay.drain() == {}
    assert format_line(NodeLine("n0", "plain")) == "plain"


def test_rank_updates_supersede_only_the_same_rank() -> None:
    a = RankUpdate(RankChanged(None, "n0", 0, RankState.ASSIGNED))
    b = RankUpdate(RankChanged(0, "n0", 0, RankState.RUNNING))
    c = RankUpdate(RankChanged(1, "n0", 1, RankState.RUNNING))
    assert b.can_replace(a)
    assert not c.can_replace(a)
