"""Grid scale: RankGrid under full updates up to 1,024 nodes x 8 ranks, in the real app (Pilot).

A full update is a RankChanged event for every rank (1,024 or 8,192 of them), handed to the screen's
SessionRelay exactly as a Session hands them (so the RankUpdates message, the screen's
handler and RankGrid.show_ranks all run), then the first frame rendered with every cell in
its new state. Updates are sent back to back for a fixed time: updates/s sustained
is how many completed, frame time is the cost of one frame (render and serialise). Smaller
grids in the same run show how the cost grows with the number of cells.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common.report import Report, Table, arg_parser, command_line, fmt_ms, verdict
from bench.common.stats import median, peak_rss_mb, percentile
from bench.common.trees import ROOT, TRAINER

UPDATE_TIMEOUT_S = 120.0
SHAPES = [(2, 2), (16, 8), (128, 8), (1024, 8)]
# full updates/s each grid must sustain
TARGETS = {(128, 8): 10.0, (1024, 8): 2.0}
STATES = ("running", "hung", "assigned", "done")


async def _drive(nodes: int, nproc: int, seconds: float) -> dict[str, Any]:
    from bench.common.pilot import FrameProbe
    from ddptui.core.events import RankChanged, RankState
    from ddptui.core.job.spec import make_spec
    from ddptui.ui.app import DdpApp

    spec = make_spec(
        backend="local", nodes=nodes, nproc_per_node=nproc, script=str(TRAINER / "envcheck.py")
    )
    app = DdpApp(spec)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.job_screen
        names = list(screen.grid.nodes)
        emit = screen.relay.emit
        await pilot.pause()
        probe = FrameProbe(app)
        startup_frames = len(probe.frames)
        update_s: list[float] = []
        done, t_end = 0, time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < t_end:
            state = RankState(STATES[done % len(STATES)])

            def send(state: RankState = state) -> None:
                for i, node in enumerate(names):
                    for lr in range(nproc):
                        emit(RankChanged(i * nproc + lr, node, lr, state))

            def shown(state: RankState = state) -> bool:
                return all(s == state for s in screen.grid.states().values())

            took = await probe.after(send, shown, UPDATE_TIMEOUT_S)
            if took == float("inf"):
                raise RuntimeError(f"{nodes}x{nproc}: a full update never reached the screen")
            update_s.append(took)
            done += 1
        elapsed = time.perf_counter() - t0
        frames = probe.frames[startup_frames:]
    return {
        "cells": nodes * nproc,
        "updates": done,
        "per_s": done / elapsed,
        "update_p50": percentile(update_s, 50),
        "update_p99": percentile(update_s, 99),
        "frame_p50": percentile(frames, 50),
        "frame_p99": percentile(frames, 99),
        "frames": len(frames),
        "rss_mb": peak_rss_mb(),
    }


def _child(nodes: int, nproc: int, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-grid-") as tmp:
        env = {**os.environ, "DDPTUI_STATE_DIR": str(Path(tmp) / "state"), "PYTHONPATH": str(ROOT)}
        cp = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.grid.grid_scale",
                "--child",
                str(nodes),
                str(nproc),
                str(seconds),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=600,
        )
    if cp.returncode != 0:
        raise RuntimeError(f"grid {nodes}x{nproc} failed: {cp.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(cp.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--child", nargs=3, help="(internal) nodes nproc seconds")
    args = parser.parse_args()
    if args.child:
        nodes, nproc, seconds = int(args.child[0]), int(args.child[1]), float(args.child[2])
        print(json.dumps(asyncio.run(_drive(nodes, nproc, seconds))))
        return
    reps = 1 if args.quick else args.reps
    seconds = 3.0 if args.quick else args.seconds
    report = Report("grid_scale", "Grid scale: RankGrid under full updates", command_line())
    report.para(__doc__.split("\n\n", 1)[1].strip() if __doc__ else "")
    report.para(
        f"Terminal 160x50 (headless driver). {seconds:.0f} s of back-to-back full "
        f"updates per run, {reps} run(s) per grid, grids alternating; medians shown."
    )
    runs: dict[tuple[int, int], list[dict[str, Any]]] = {shape: [] for shape in SHAPES}
    for rep in range(reps):
        for shape in SHAPES:
            runs[shape].append(result := _child(*shape, seconds))
            print(
                f"  [{rep + 1}/{reps}] {shape[0]}x{shape[1]}: {result['per_s']:.2f} updates/s,"
                f" update p50 {fmt_ms(result['update_p50'])}",
                flush=True,
            )
    table = Table(
        [
            "grid (nodes x ranks)",
            "cells",
            "full updates/s",
            "update p50 / p99",
            "frame p50 / p99",
            "frames",
            "peak RSS",
            "per cell",
        ]
    )
    for (nodes, nproc), results in runs.items():
        per_s = median([r["per_s"] for r in results])
        p50 = median([r["update_p50"] for r in results])
        table.add(
            f"{nodes} x {nproc}",
            nodes * nproc,
            f"{per_s:.2f}",
            f"{fmt_ms(p50)} / {fmt_ms(median([r['update_p99'] for r in results]))}",
            f"{fmt_ms(median([r['frame_p50'] for r in results]))} / "
            f"{fmt_ms(median([r['frame_p99'] for r in results]))}",
            f"{median([r['frames'] for r in results]):.0f}",
            f"{median([r['rss_mb'] for r in results]):.0f} MB",
            f"{p50 / (nodes * nproc) * 1e6:.0f} us",
        )
    report.table(table)
    for (nodes, nproc), target in TARGETS.items():
        got = median([r["per_s"] for r in runs[(nodes, nproc)]])
        report.para(
            f"**{nodes} x {nproc} ({nodes * nproc:,} ranks): {got:.2f} full updates/s** "
            f"(target >= {target:.0f}: "
            f"{verdict(got >= target, f'{got / target:.2f}x the target')})."
        )
    report.write()


if __name__ == "__main__":
    main()
