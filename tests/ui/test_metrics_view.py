"""The metrics view: snapshots from real runs' captured metrics, and real runs in the console.

The snapshots are drawn from the `metrics.jsonl` of real runs of the bundled trainers
(`cifar10_vgg.py` 1 node x 2 ranks on generated CIFAR-10 batches, `elastic_ddp.py` 2 nodes x
1 rank; tests/data/metrics/), so no clock or rate of this machine shows in a picture; the
Pilot tests run the trainers for real and read the view they get.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from ddptui.core.events import MetricSampled
from ddptui.core.metrics.metrics_file import read_samples
from ddptui.ui.relay import LiveMetrics
from ddptui.ui.screens.metrics import MetricsScreen
from tests.cases import DATA

from .screen_host import ScreenHost

METRICS = DATA / "metrics"
CIFAR = METRICS / "cifar10_vgg_1x2"
ELASTIC = METRICS / "elastic_ddp_2x1"
ELASTIC_EARLIER = METRICS / "elastic_ddp_2x1_earlier"  # the same job, run before
SIZES = [(80, 24), (160, 48)]


def live(run: Path) -> LiveMetrics:
    metrics = LiveMetrics()
    for s in read_samples(run / "metrics.jsonl"):
        metrics.add(MetricSampled(s.rank, s.step, s.values, ts=s.ts))
    return metrics


def screen_app(run: Path, past: list[tuple[str, Path]] | None = None,
               compare: str | None = None) -> ScreenHost:  # fmt: skip
    return ScreenHost(lambda: MetricsScreen(live(run), "20260101-000000-cafe01", past, compare))


def figures_text(app: ScreenHost) -> str:
    screen = app.screen
    assert isinstance(screen, MetricsScreen)
    return str(screen.figures.render())


async def settle(pilot: Pilot[Any]) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.1)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_cifar10_vgg_loss_at_every_size(snap_compare: Any, size: tuple[int, int]) -> None:
    """Loss of two ranks: the highest and lowest across them by epoch; every metric's latest,
    trend and best beside it (accuracy, samples/s summed over the ranks)."""
    assert snap_compare(screen_app(CIFAR), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_cifar10_vgg_throughput_at_every_size(snap_compare: Any, size: tuple[int, int]) -> None:
    """`]` three times: samples/s summed over ranks."""
    press = ["right_square_bracket"] * 3
    assert snap_compare(screen_app(CIFAR), press=press, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_elastic_ddp_with_a_past_run_laid_over(snap_compare: Any, size: tuple[int, int]) -> None:
    """elastic_ddp.py's loss by step, an earlier run's laid over it (`--compare`)."""

    async def loaded(pilot: Pilot[Any]) -> None:
        await settle(pilot)

    earlier = "20251231-000000-cafe00"
    app = screen_app(ELASTIC, [(earlier, ELASTIC_EARLIER)], earlier)
    assert snap_compare(app, run_before=loaded, terminal_size=size)


async def test_the_keys_pick_metrics_and_cycle_past_runs() -> None:
    app = screen_app(CIFAR, [("a", ELASTIC), ("b", CIFAR)])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        text = figures_text(app)
        for name in ("loss", "train_acc", "test_acc", "samples/s Σ"):
            assert name in text
        assert screen.selected == "loss"
        await pilot.press("right_square_bracket")
        assert screen.selected == "train_acc"
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert screen.selected == "samples/s"
        await pilot.press("c")
        await settle(pilot)
        assert screen.past is not None and screen.past.run_id == "a"
        assert "over run a" in str(screen.title_bar.render())
        await pilot.press("c", "c")
        await settle(pilot)
        assert screen.past is None  # after the last: none
        await pilot.press("escape")
        assert app.results == [None]


async def test_a_nan_is_shown_as_the_latest_value() -> None:
    metrics = LiveMetrics()
    for step, loss in enumerate([2.0, 1.5, 1.2, float("nan")]):
        metrics.add(MetricSampled(0, step, {"loss": loss}, ts=float(step)))
    app = ScreenHost(lambda: MetricsScreen(metrics))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "nan" in figures_text(app)
        assert "best 1.2" in figures_text(app)


def test_the_view_imports_no_plot_library_at_start() -> None:
    """The view draws its braille itself: no plotting library is imported for it."""
    import subprocess
    import sys

    code = (
        "import ddptui.ui.app, sys; "
        "print(sorted(m for m in sys.modules if 'plot' in m and not m.startswith('ddptui')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
