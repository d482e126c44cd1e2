"""Provides the GPU sampler's cost: training samples/s with it off and on, interleaved.

    python bench/gpu/cost.py OUT_DIR [--rounds 5] [--modes 0,1000,200] [--budget-s 190]

Each run is `ddptui run --headless --nodes 1 --nproc-per-node G --gpu-sample-ms MS
trainer/steady_ddp.py ...` (a stack of large Linear layers, bf16, fixed batch on the GPU,
DDP over NCCL: GPU-bound, no data path on the CPU), MS = 0 is the sampler off. A round runs
every mode once, the order rotating round to round. The rate of a run is the mean of its
ranks' throughput over the timed windows (after the warm-up, closed by a synchronize).
If, after the first round, the rounds left would not fit `--budget-s`, the last mode is
dropped (its first-round run stays in the table). Without a GPU it runs a tiny model on
gloo/CPU: that is how it is tested before a GPU run. Writes OUT_DIR/cost.json and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.gpu.telemetry import gpu_count, headless, versions  # noqa: E402

THROUGHPUT = re.compile(r"throughput: ([\d.]+) samples/s")
WINDOW = re.compile(r"window=\d+ samples/s=([\d.]+)")
GPU_ARGS = ["--width", "8192", "--layers", "8", "--batch", "4096", "--warmup", "30"]
CPU_ARGS = ["--width", "64", "--layers", "2", "--batch", "32", "--warmup", "2"]


def run_once(out: Path, name: str, nproc: int, ms: int, trainer_args: list[str]) -> dict:
    argv = ["--nodes", "1", "--nproc-per-node", str(nproc), "--gpu-sample-ms", str(ms)]
    argv += [str(ROOT / "trainer" / "steady_ddp.py"), *trainer_args]
    t0 = time.monotonic()
    events = headless(out, name, argv)
    log = out / f"{name}.node.log"
    text = log.read_text() if log.exists() else ""
    rates = [float(r) for r in THROUGHPUT.findall(text)]
    windows = [float(r) for r in WINDOW.findall(text)]
    summary = next((e for e in events if e["event"] == "summary"), {})
    return {
        "ms": ms,
        "rate": statistics.mean(rates) if rates else None,
        "window_spread": (max(windows) - min(windows)) / statistics.mean(windows)
        if windows
        else None,
        "gpu_events": sum(e["event"] == "gpu" for e in events),
        "wall_s": round(time.monotonic() - t0, 1),
        "ok": summary.get("ok"),
    }


def table(runs: list[dict], modes: list[int]) -> str:
    def name(ms: int) -> str:
        return "off" if ms == 0 else f"{ms} ms"

    by_mode = {ms: [r["rate"] for r in runs if r["ms"] == ms and r["rate"]] for ms in modes}
    rounds = max(len(v) for v in by_mode.values())
    lines = ["| round | " + " | ".join(name(ms) for ms in modes) + " |"]
    lines.append("|---:|" + "---:|" * len(modes))
    for i in range(rounds):
        cells = [f"{v[i]:,.0f}" if i < len(v) else "" for v in by_mode.values()]
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    base = by_mode.get(0) or []
    for label, fn in (("median", statistics.median), ("mean", statistics.mean)):
        cells = [f"{fn(v):,.0f}" if v else "" for v in by_mode.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = [
        f"{(max(v) - min(v)) / statistics.median(v):.2%}" if len(v) > 1 else ""
        for v in by_mode.values()
    ]
    lines.append("| spread (max-min)/median | " + " | ".join(cells) + " |")
    if base:
        cells = [
            f"{statistics.median(v) / statistics.median(base) - 1:+.2%}" if v else ""
            for v in by_mode.values()
        ]
        lines.append("| median vs off | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--modes", default="0,1000,200", help="sampling periods, ms (0: off)")
    p.add_argument("--budget-s", type=float, default=190.0)
    p.add_argument("--steps", type=int, default=0, help="steps a timed window (default: auto)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ngpu = gpu_count()
    nproc = ngpu or 2
    trainer_args = (GPU_ARGS if ngpu else CPU_ARGS) + [
        "--steps",
        str(args.steps or (40 if ngpu else 5)),
        "--windows",
        "5",
    ]
    modes = [int(m) for m in args.modes.split(",")]
    started = time.monotonic()
    runs: list[dict] = []
    print(json.dumps({"versions": versions(), "gpus": ngpu, "trainer": trainer_args}), flush=True)
    for i in range(args.rounds):
        order = modes[i % len(modes) :] + modes[: i % len(modes)]
        for ms in order:
            run = {"round": i, **run_once(out, f"cost_{ms}_{i}", nproc, ms, trainer_args)}
            runs.append(run)
            print(json.dumps(run), flush=True)
            (out / "cost.json").write_text(json.dumps({"trainer": trainer_args, "runs": runs}))
        if i == 0 and len(modes) > 2:
            per_run = (time.monotonic() - started) / len(modes)
            if per_run * len(modes) * (args.rounds - 1) > args.budget_s:
                modes = modes[:-1]
                print(f"dropping a mode: {per_run:.1f} s a run", flush=True)
    all_modes = sorted({r["ms"] for r in runs}, key=lambda m: (m != 0, -m))
    text = table(runs, all_modes)
    (out / "cost.json").write_text(json.dumps({"trainer": trainer_args, "runs": runs}, indent=1))
    (out / "cost.md").write_text(text + "\n")
    print(text, flush=True)


if __name__ == "__main__":
    main()
