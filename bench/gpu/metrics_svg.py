"""Provides an SVG of the console's metrics view from a Pilot run of a real cifar10_vgg.py job.

    python bench/gpu/metrics_svg.py OUT_DIR --data DIR [--nproc N] [--epochs E] [--batch-size B]

Launches trainer/cifar10_vgg.py in the console on this machine (`nodes 1`, one process per
GPU), waits for the run to end, opens the metrics view (`M`) and saves it as
OUT_DIR/metrics_view_loss.svg, then the summed throughput (`[`) as
OUT_DIR/metrics_view_samples.svg, each at 160x48, and the loss again at 80x24.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--data", default="")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--timeout-s", type=float, default=1200.0)
    args = p.parse_args()
    os.environ.setdefault("DDPTUI_STATE_DIR", tempfile.mkdtemp(prefix="ddptui-metrics-"))
    os.environ.setdefault("DDPTUI_CONFIG_DIR", tempfile.mkdtemp(prefix="ddptui-metrics-cfg-"))
    from ddptui.core.job.spec import make_spec
    from ddptui.ui.app import DdpApp
    from ddptui.ui.screens.metrics import MetricsScreen

    data = ("--data", args.data) if args.data else ()
    spec = make_spec(
        script=str(ROOT / "trainer" / "cifar10_vgg.py"),
        script_args=(*data, "--epochs", str(args.epochs), "--batch-size", str(args.batch_size)),
        nodes=1,
        nproc_per_node=args.nproc,
    )
    out = Path(args.out)
    app = DdpApp(spec)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.job_screen
        await pilot.press("l")
        deadline = time.monotonic() + args.timeout_s
        while (screen.session is None or screen.job_active) and time.monotonic() < deadline:
            await pilot.pause(1.0)
        summary = screen.summary
        print("ok:", summary.ok if summary else None, flush=True)
        print("metrics:", summary.metrics if summary else None, flush=True)
        await pilot.press("M")
        await pilot.pause(1.5)
        assert isinstance(app.screen, MetricsScreen)
        app.save_screenshot(filename="metrics_view_loss.svg", path=str(out))
        await pilot.press("left_square_bracket")  # the last metric: samples/s, summed
        await pilot.pause(1.5)
        app.save_screenshot(filename="metrics_view_samples.svg", path=str(out))
        await pilot.press("right_square_bracket")
        await pilot.resize_terminal(80, 24)
        await pilot.pause(1.5)
        app.save_screenshot(filename="metrics_view_loss_80x24.svg", path=str(out))
        print("saved", out / "metrics_view_loss.svg", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
