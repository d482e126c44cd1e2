"""The metrics view of real runs in the console: cifar10_vgg.py (1 node x 2 ranks on CIFAR-10
batches written offline) and elastic_ddp.py (2 nodes x 1 rank), local backend, gloo on CPU;
read at 80x24 and at 160x48, with a screenshot of each kept beside the test's files."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from ddptui.core.job.spec import make_spec
from ddptui.ui.app import DdpApp
from ddptui.ui.screens.metrics import MetricsScreen
from tests.cases import TRAINER
from tests.integration.test_cifar10_vgg import write_batches

from .conftest import wait_for

RUN_TIMEOUT = 400.0


async def _run_and_open_metrics(pilot: Pilot[object], app: DdpApp) -> MetricsScreen:
    screen = app.job_screen
    await pilot.press("l")
    await wait_for(pilot, lambda: screen.session is not None, "the session")
    await wait_for(pilot, lambda: not screen.job_active, "the run to end", RUN_TIMEOUT)
    assert screen.summary is not None and screen.summary.ok, screen.summary
    await pilot.press("M")
    await pilot.pause(0.6)
    metrics = app.screen
    assert isinstance(metrics, MetricsScreen)
    return metrics


def _figures(metrics: MetricsScreen) -> str:
    return str(metrics.figures.render())


def _plot_has_curves(metrics: MetricsScreen) -> bool:
    text = str(metrics.plot.render())
    return any(0x2801 <= ord(c) <= 0x28FF for c in text)


async def test_cifar10_vgg_shows_loss_accuracy_and_samples_per_second(tmp_path: Path) -> None:
    write_batches(tmp_path / "cifar", per_batch=32)
    spec = make_spec(
        nodes=1, nproc_per_node=2, script=str(TRAINER / "cifar10_vgg.py"),
        script_args=("--data", str(tmp_path / "cifar"), "--epochs", "4", "--batch-size", "16"),
        hang_timeout=0,
    )  # fmt: skip
    app = DdpApp(spec)
    async with app.run_test(size=(80, 24)) as pilot:
        metrics = await _run_and_open_metrics(pilot, app)
        figures = _figures(metrics)
        for name in ("loss", "train_acc", "test_acc", "samples/s Σ"):
            assert name in figures, figures
        assert "r0-1" in figures  # both ranks print them
        assert _plot_has_curves(metrics)
        assert "max of 2 ranks" in str(metrics.plot.render())
        app.save_screenshot(str(tmp_path / "cifar_80x24.svg"))
        await pilot.press("left_square_bracket")  # the last metric: samples/s, summed
        await pilot.pause(0.6)
        assert metrics.selected == "samples/s"
        assert "sum of 2 ranks" in str(metrics.plot.render())
        await pilot.resize_terminal(160, 48)
        await pilot.pause(0.6)
        assert _plot_has_curves(metrics)
        assert metrics.plot.size.width > 100
        app.save_screenshot(str(tmp_path / "cifar_160x48.svg"))
        summary = app.job_screen.summary
        assert summary is not None and summary.metrics["samples/s.mean"] > 0
    assert (Path(summary.run_dir) / "metrics.jsonl").exists()


async def test_elastic_ddp_shows_loss_and_samples_per_second(tmp_path: Path) -> None:
    spec = make_spec(
        nodes=2, nproc_per_node=1, script=str(TRAINER / "elastic_ddp.py"),
        script_args=("--steps", "30"), hang_timeout=0,
    )  # fmt: skip
    app = DdpApp(spec)
    async with app.run_test(size=(160, 48)) as pilot:
        metrics = await _run_and_open_metrics(pilot, app)
        figures = _figures(metrics)
        assert "loss" in figures and "samples/s Σ" in figures, figures
        assert metrics.selected == "loss"
        assert "step 1" in str(metrics.plot.render())
        app.save_screenshot(str(tmp_path / "elastic_160x48.svg"))
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.6)
        assert _plot_has_curves(metrics)
        await pilot.press("escape")
        assert app.screen is app.job_screen
