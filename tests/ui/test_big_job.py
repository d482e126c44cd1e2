"""A 128-node x 8-rank job run for real on this machine: 128 local pseudo-nodes, each a
stand-in torchrun (testbed/standins/fake_torchrun.py) printing the rendezvous result and
every rank's epoch lines. The grid folds the nodes that look alike into ranges and shows the
odd one out; the merged log folds the epoch lines that differ only in their numbers."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp
from testbed.standins import FAKE_TORCHRUN

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = FAKE_TORCHRUN
NODES, NPROC = 128, 8


def grid_text(app: DdpApp) -> list[str]:
    return ["".join(span.text for span in line) for line in app.job_screen.grid.lines]


async def until(predicate: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    """Poll without waiting for the screen to be idle: 128 nodes' events never let it be."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)


@pytest.mark.integration
@pytest.mark.timeout(900)
async def test_a_128x8_job_folds_its_grid_and_its_merged_log() -> None:
    spec = make_spec(
        backend="local",
        nodes=NODES,
        nproc_per_node=NPROC,
        script=str(ROOT / "trainer" / "envcheck.py"),  # not run: the stand-in takes its place
        # rank 3 of node 41 fails once every other node is done, however far apart the 128
        # nodes started on a loaded machine (the others, still running, would be stopped)
        script_args=(
            *("--epochs", "3", "--epoch-s", "2", "--odd", "7/2"),
            *("--fail", "41/3", "--fail-late", "15"),
        ),
        launcher=f"{sys.executable} {STAND_IN}",
    )
    app = DdpApp(spec)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.job_screen
        await pilot.press("l")
        await until(lambda: screen.summary is not None, "the run to end")
        # every rank ran; node 41 failed (rank 331 first, its node's others stopped with it)
        assert screen.grid.counts() == {"done": 1016, "failed": 8}
        assert grid_text(app) == [
            "failed 8 · done 1016",
            "local[0-40] ✓×328 done",
            " " * 18 + "01234567",
            "local41  r328-335 ✗✗✗✗✗✗✗✗",
            "local[42-127] ✓×688 done",
        ]

        deck = screen.logs
        deck.show(None)
        assert deck.toggle_fold()
        await asyncio.sleep(0.5)
        merged = list(deck.merged_view.lines)
        # rank 58 prints `Steps: 9`: a number apart only, it folds with the others, the
        # range says so (ranks that print their next epoch first fold into a row of their own)
        epochs = [line for line in merged if "| Batchsize: 32 | Steps: " in line]
        assert any("r58" in line.partition("]")[0] or "-" in line.partition("]")[0]
                   for line in epochs if "Steps: 8..9" in line)  # fmt: skip
        assert not any(line.startswith("[local7/r58]") for line in epochs)
        assert len(merged) < 100  # 3 epochs of 1,024 ranks, the notes, rank 331's traceback
