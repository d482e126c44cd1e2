"""The collective sampler's cost in the workers: step time with it on and off, interleaved.

Runs torchrun (2 ranks, gloo on CPU, or NCCL where there are GPUs) on the plain DDP loop
of the straggler tests with no sleep (`--step-s 0`: every step is compute and all-reduce,
so the flight recorder's ring of 2,000 records is full after a few seconds and every dump
is the most expensive one), with the worker hook installed as the job helper installs it;
DDPTUI_COLLECTIVES_S=1 (on) or 0 (off). Reports the median wall time of the run's steps
per mode and the sampler's own account from its records (dump time, CPU, period).

    python3 -m bench.straggler.cost [--reps 3] [--steps 1500] [--nproc 2] [--step-s 0]

Off: the flight recorder only (the stall watch's, there in both modes); on: NCCL's GPU
timing (TORCH_NCCL_ENABLE_TIMING=1) and the sampler too, which is what the straggler watch
adds to a job.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

from ddptui.core.node import worker_hook_source

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "data" / "straggler" / "slow_rank_ddp.py"


def one_run(on: bool, steps: int, nproc: int, port: int, extra: list[str], step_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "hook").mkdir()
        (base / "hook" / "sitecustomize.py").write_bytes(worker_hook_source())
        env = {
            **os.environ,
            "DDPTUI_DEBUG_DIR": str(base),
            "PYTHONPATH": str(base / "hook"),
            "TORCH_FR_BUFFER_SIZE": "2000",  # the stall watch's, on in both modes
            "DDPTUI_COLLECTIVES_S": "1" if on else "0",
        }
        if on:  # the straggler watch's own: NCCL's GPU timing and the sampler
            env["TORCH_NCCL_ENABLE_TIMING"] = "1"
        else:
            env.pop("TORCH_NCCL_ENABLE_TIMING", None)
        argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
        argv += [
            f"--master_port={port}",
            str(SCRIPT),
            "--steps",
            str(steps),
            "--step-s",
            str(step_s),
        ]
        done = subprocess.run(argv + extra, env=env, capture_output=True, text=True, timeout=600)
        found = re.findall(rf"step {steps - 1} loss \S+ elapsed ([\d.]+)s", done.stdout)
        if not found:
            raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
        records = []
        for path in sorted((base / "collectives").glob("rank_*.jsonl")):
            records += [json.loads(line) for line in path.read_text().splitlines()]
        return {"elapsed": max(map(float, found)), "records": records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--step-s", type=float, default=0.0, help="sleep a step (data loading)")
    args, extra = parser.parse_known_args()
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for rep in range(args.reps):
        for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
            run = one_run(mode == "on", args.steps, args.nproc, 29650 + rep, extra, args.step_s)
            runs[mode].append(run)
            print(f"rep {rep} {mode}: {run['elapsed']:.2f} s", flush=True)
    off = median(r["elapsed"] for r in runs["off"])
    on = median(r["elapsed"] for r in runs["on"])
    records = [rec for r in runs["on"] for rec in r["records"]]
    print()
    print("| mode | median s / step | runs (s) |")
    print("|---|---:|---|")
    for mode, value in (("off", off), ("on", on)):
        each = ", ".join(f"{r['elapsed']:.2f}" for r in runs[mode])
        print(f"| {mode} | {value / args.steps * 1e3:.2f} ms | {each} |")
    print(f"\nstep time on/off: {on / off:.4f} ({(on / off - 1) * 100:+.2f}%)")
    if records:
        costs = [r["cost_us"] for r in records]
        cpu = sum(r["cpu_us"] for r in records) / 1e6
        rows = sum(len(r["rows"]) for r in records)
        ranks = len({r["rank"] for r in records})
        wall = ranks * median(r["elapsed"] for r in runs["on"]) * len(runs["on"])
        print(
            f"sampler: {len(records)} lines, {rows} records, dump+read median "
            f"{median(costs) / 1e3:.1f} ms (max {max(costs) / 1e3:.1f}), period up to "
            f"{max(r['period_s'] for r in records):.1f} s, its CPU {cpu:.2f} s = "
            f"{cpu / wall * 100:.3f}% of the ranks' wall time"
        )


if __name__ == "__main__":
    main()
