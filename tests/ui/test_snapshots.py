"""Snapshot tests of the console's key screens, made deterministic with a fixed job.

Runs are replayed from torchrun output captured on this machine (tests/ui/replay.py), so no
path, port, run id or clock in a picture depends on the machine or the moment.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from ddptui.core.events import Event, NodeChanged, NodeLines, NodeState, RankChanged, RankState
from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp

from .conftest import SIZE
from .replay import T0, crash_events, feed, running_events


def fixed_app(keymap: str | None = None) -> DdpApp:
    """No path, port, run id or clock in the picture depends on this machine or this run."""
    spec = make_spec(
        script="/opt/ddptui/trainer/envcheck.py",
        script_args=("--sleep", "30"),
        workdir="/srv/ddp",
        launcher="python3 -m torch.distributed.run",
    )
    return DdpApp(spec, keymap_path=keymap)


async def crashed(pilot: Pilot[Any]) -> None:
    """envcheck.py --fail-rank 1 on two nodes, as its events would arrive."""
    app = pilot.app
    assert isinstance(app, DdpApp)
    feed(app.job_screen, crash_events())
    await settle(pilot)


async def settle(pilot: Pilot[Any]) -> None:
    """Wait for the refresh (and any worker) after the lines, so the scrollbars are final."""
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_main_screen_before_launch(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), terminal_size=SIZE)


def test_help_screen(snap_compare: Any) -> None:
    assert snap_compare(fixed_app(), press=["question_mark"], terminal_size=SIZE)


def test_failed_run_with_root_cause(snap_compare: Any) -> None:
    """Red cells with exit codes, torchrun's root cause (rank 1, first observed) on the left."""
    assert snap_compare(fixed_app(), run_before=crashed, terminal_size=SIZE)


def test_merged_log_filtered_to_one_rank(snap_compare: Any) -> None:
    async def filtered(pilot: Pilot[Any]) -> None:
        await crashed(pilot)
        await pilot.press("m", "f", *"rank:1", "enter")
        await settle(pilot)

    assert snap_compare(fixed_app(), run_before=filtered, terminal_size=SIZE)


def test_vim_keymap_footer(snap_compare: Any) -> None:
    assert snap_compare(fixed_app("vim"), terminal_size=SIZE)


def test_vim_keymap_help(snap_compare: Any) -> None:
    assert snap_compare(fixed_app("vim"), press=["f1"], terminal_size=SIZE)


# -- every size: a laptop's 80x24, a tmux pane's 120x40, a big screen's 200x60 ------------

SIZES = [(80, 24), (120, 40), (200, 60)]
BIG_NODES, BIG_NPROC = 128, 8
OUTLIERS = {
    ("local41", 3): (RankState.FAILED, 137),
    ("local41", 4): (RankState.FAILED, 1),
    ("local77", 0): (RankState.HUNG, None),
    ("local100", 6): (RankState.RUNNING, None),  # a straggler
}


def big_app() -> DdpApp:
    spec = make_spec(
        script="/opt/ddptui/trainer/envcheck.py",
        nodes=BIG_NODES,
        nproc_per_node=BIG_NPROC,
        workdir="/srv/ddp",
        launcher="python3 -m torch.distributed.run",
    )
    return DdpApp(spec)


def big_grid_events() -> list[Event]:
    """A 128 x 8 job, every rank running but a few: two failed, one hung, one slow; each
    rank's epoch line (rank 9's differs) for the merged view to fold."""
    events: list[Event] = []
    for n in range(BIG_NODES):
        node = f"local{n}"
        events.append(NodeChanged(node, NodeState.RUNNING, ts=T0))
        for lr in range(BIG_NPROC):
            rank = n * BIG_NPROC + lr
            state, code = OUTLIERS.get((node, lr), (RankState.RUNNING, None))
            slow = (node, lr) == ("local100", 6)
            events.append(RankChanged(rank, node, lr, state, code, straggler=slow, ts=T0))
        lines = [
            (f"Epoch 3 | Batchsize: 32 | Steps: {9 if rank == 9 else 8}", rank, rank % BIG_NPROC)
            for rank in range(n * BIG_NPROC, (n + 1) * BIG_NPROC)
        ]
        events.append(NodeLines(node, lines, 1, ts=T0))
    return events


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_before_launch_at_every_size(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(fixed_app(), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_running_at_every_size(snap_compare: Any, size: tuple[int, int]) -> None:
    async def running(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DdpApp)
        feed(app.job_screen, running_events())
        await settle(pilot)

    assert snap_compare(fixed_app(), run_before=running, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_failed_rank_at_every_size(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(fixed_app(), run_before=crashed, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_128x8_grid_with_outliers_at_every_size(snap_compare: Any, size: tuple[int, int]) -> None:
    """Runs of running nodes folded into ranges, the outliers on lines of their own, counts
    in the title; the merged log folds the epoch line (rank 9's apart)."""

    async def big(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DdpApp)
        feed(app.job_screen, big_grid_events())
        await settle(pilot)
        app.job_screen.logs.show(None)
        app.job_screen.logs.toggle_fold()  # the key says so in a toast that times out
        await settle(pilot)

    assert snap_compare(big_app(), run_before=big, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_stall_at_every_size(snap_compare: Any, size: tuple[int, int]) -> None:
    """No rank progressed for the hang timeout: the monitor marks every rank hung (rank 1,
    whose stack differs, the suspect)."""

    async def stalled(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DdpApp)
        hung = [
            RankChanged(r, f"local{r // 2}", r % 2, RankState.HUNG, suspect=r == 1, ts=T0 + 90)
            for r in range(4)
        ]
        feed(app.job_screen, [*running_events(), *hung])
        await settle(pilot)

    assert snap_compare(fixed_app(), run_before=stalled, terminal_size=size)


def test_2x8_grid_at_120_columns_names_every_rank(snap_compare: Any) -> None:
    """Too narrow for a labelled cell per rank: each node's ranks as a range before its
    glyphs (`r8-15`) and the local ranks over them, so every cell can be named unclicked."""
    spec = make_spec(
        script="/opt/ddptui/trainer/envcheck.py",
        nodes=2,
        nproc_per_node=8,
        workdir="/srv/ddp",
        launcher="python3 -m torch.distributed.run",
    )

    async def running(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, DdpApp)
        events: list[Event] = []
        for n in range(2):
            events.append(NodeChanged(f"local{n}", NodeState.RUNNING, ts=T0))
            events += [
                RankChanged(n * 8 + lr, f"local{n}", lr, RankState.RUNNING, ts=T0)
                for lr in range(8)
            ]
        feed(app.job_screen, events)
        await settle(pilot)
        drawn = ["".join(s.text for s in line) for line in app.job_screen.grid.lines]
        assert drawn[1:] == [
            "             01234567",
            "local0 r0-7  ▶▶▶▶▶▶▶▶",
            "local1 r8-15 ▶▶▶▶▶▶▶▶",
        ], drawn

    assert snap_compare(DdpApp(spec), run_before=running, terminal_size=(120, 40))
