"""Provides an SVG of the console with GPU telemetry, from a Pilot run of a real job.

    python bench/gpu/console_svg.py OUT.svg [--nproc N] [--wait-s 60]

Launches trainer/hang.py --skip-rank 1 (rank 1 skips the last all_reduce; NCCL on GPUs) in
the console on this machine (`nodes 1`, one process per GPU), waits until the GPU flags say
"busy, no progress" and "idle" (or `--wait-s`), opens the GPU panel (`u`), saves the screen
as OUT.svg, then tears the job down through the console and prints its teardown proof.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True).stdout
    return len([ln for ln in out.splitlines() if ln.startswith("GPU")])


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--nproc", type=int, default=0)
    p.add_argument("--wait-s", type=float, default=60.0)
    args = p.parse_args()
    os.environ.setdefault("DDPTUI_STATE_DIR", tempfile.mkdtemp(prefix="ddptui-svg-"))
    os.environ.setdefault("DDPTUI_CONFIG_DIR", tempfile.mkdtemp(prefix="ddptui-svg-cfg-"))
    from ddptui.core.job.spec import make_spec
    from ddptui.ui.app import DdpApp

    spec = make_spec(
        script=str(ROOT / "trainer" / "hang.py"),
        script_args=("--skip-rank", "1", "--steps", "5"),
        nodes=1,
        nproc_per_node=args.nproc or gpus() or 2,
        hang_timeout=90.0,
    )
    app = DdpApp(spec)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.job_screen
        await pilot.press("l")
        deadline = time.monotonic() + args.wait_s
        while time.monotonic() < deadline:
            kinds = {kind for _, _, kind in screen._gpu_flags}
            if {"busy_no_progress", "idle"} <= kinds:
                break
            await pilot.pause(0.5)
        print("flags:", sorted(screen._gpu_flags), flush=True)
        await pilot.press("u")
        await pilot.pause(1.5)
        app.save_screenshot(filename=Path(args.out).name, path=str(Path(args.out).parent))
        print("saved", args.out, flush=True)
        screen.teardown()
        deadline = time.monotonic() + 90
        while screen.summary is None and time.monotonic() < deadline:
            await pilot.pause(0.5)
        for report in screen.outcome.reports.values():
            print("teardown:", report.node, report.clean, report.detail, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
