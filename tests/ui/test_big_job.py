"""A 128-node x 8-rank job run for real on this machine: 128 local pseudo-nodes, each a
stand-in torchrun (bench/fake_torchrun.py) printing the rendezvous result and every rank's
epoch lines. The grid folds the nodes that look alike into ranges and shows the odd one out;
the merged log folds the epoch line all ranks print alike, and keeps the one that differs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp

from .conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = ROOT / "bench" / "fake_torchrun.py"
NODES, NPROC = 128, 8


def grid_text(app: DdpApp) -> list[str]:
    return ["".join(span.text for span in line) for line in app.job_screen.grid.lines]


@pytest.mark.integration
@pytest.mark.timeout(600)
async def test_a_128x8_job_folds_its_grid_and_its_merged_log() -> None:
    spec = make_spec(
        backend="local",
        nodes=NODES,
        nproc_per_node=NPROC,
        script=str(ROOT / "trainer" / "envcheck.py"),  # not run: the stand-in takes its place
        script_args=("--epochs", "3", "--epoch-s", "4", "--odd", "7/2", "--fail", "41/3"),
        launcher=f"{sys.executable} {STAND_IN}",
    )
    app = DdpApp(spec)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.job_screen
        await pilot.press("l")
        await wait_for(
            pilot,
            lambda: screen.grid.counts()["running"] == NODES * NPROC,
            "every rank running",
            timeout=300,
        )
        assert "local[0-127] ▶×1024 running" in grid_text(app)

        await wait_for(pilot, lambda: screen.grid.counts()["failed"] > 0, "rank 331 failing")
        odd_one = [line for line in grid_text(app) if line.startswith("local41 ")]
        assert odd_one and odd_one[0].startswith("local41  ▶▶▶✗▶▶▶▶")
        assert any(line.startswith("local[0-40] ") for line in grid_text(app))

        deck = screen.logs
        deck.show(None)
        assert deck.toggle_fold()
        await pilot.pause()
        merged = list(deck.merged_view.lines)
        epoch0 = [line for line in merged if line.endswith("Epoch 0 | Batchsize: 32 | Steps: 8")]
        assert epoch0 and epoch0[0].startswith("[r0-57,59-")  # rank 58 printed Steps: 9
        assert "[local7/r58] Epoch 0 | Batchsize: 32 | Steps: 9" in merged
        assert len(merged) < NODES * NPROC  # 1,024 ranks' epoch lines, a few rows
        await wait_for(pilot, lambda: not screen.job_active, "the run to end", timeout=300)
