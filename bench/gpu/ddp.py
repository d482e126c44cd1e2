"""Provides the GPU benchmark: NCCL all-reduce and DDP throughput launched through ddptui.

Run on a machine with GPUs (`python bench/gpu/ddp.py OUT.md`). For every GPU count it runs
trainer/allreduce_bench.py through `ddptui run --headless` (local backend, one process per
GPU) and, in the same run, the bare loop of bench/gpu/raw_allreduce.py under plain torchrun;
then trainer/cpu_ddp.py and trainer/elastic_ddp.py on 1..N GPUs for samples/s and scaling.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
SIZES = [MiB << k for k in range(0, 11)]  # 1 MiB .. 1 GiB
ITERS, WARMUP = 20, 5
REPEATS = int(os.environ.get("GPU_BENCH_REPEATS", "3"))


def ddptui(nproc: int, script: str, *args: str) -> str:
    """Run a trainer script through ddptui headless; return every node log's text."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddptui.cli",
            "run",
            "--headless",
            "--nodes",
            "1",
            "--nproc-per-node",
            str(nproc),
            str(ROOT / "trainer" / script),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    if not summary.get("ok"):
        raise RuntimeError(f"{script} failed: {summary.get('detail')}\n{proc.stderr[-2000:]}")
    logs = Path(summary["run_dir"]) / "nodes"
    return "".join(p.read_text() for p in sorted(logs.glob("*.log")))


def raw_allreduce(nproc: int) -> dict[int, float]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            str(ROOT / "bench" / "gpu" / "raw_allreduce.py"),
            str(ITERS),
            str(WARMUP),
            ",".join(map(str, SIZES)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RAW_RESULT "))
    return {r["bytes"]: r["busbw_gbps"] for r in json.loads(line.split(" ", 1)[1])}


def ddptui_allreduce(nproc: int) -> dict[int, float]:
    text = ddptui(
        nproc,
        "allreduce_bench.py",
        "--min-bytes",
        str(SIZES[0]),
        "--max-bytes",
        str(SIZES[-1]),
        "--iters",
        str(ITERS),
        "--warmup",
        str(WARMUP),
    )
    line = next(x for x in text.splitlines() if "ALLREDUCE_RESULT " in x)
    data = json.loads(line.split("ALLREDUCE_RESULT ", 1)[1])
    return {r["bytes"]: r["busbw_gbps"] for r in data["results"]}


def throughput(nproc: int, script: str, args: list[str], pattern: str) -> float:
    text = ddptui(nproc, script, *args)
    return sum(float(m) for m in re.findall(pattern, text))


def main() -> int:
    out = Path(sys.argv[1])
    import torch

    gpus = torch.cuda.device_count()
    name = torch.cuda.get_device_name(0)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.split()[0]
    lines = [
        f"# GPU benchmarks: {gpus} x {name}",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))},"
        f" driver {smi}, Python {platform.python_version()}, {os.cpu_count()} CPUs",
        f"- all-reduce: float32, {ITERS} timed ops after {WARMUP} warm-up, slowest rank's "
        f"mean; median of {REPEATS} runs, ddptui and raw interleaved",
        "",
    ]
    counts = [n for n in (1, 2, 4, 8) if n <= gpus]
    for nproc in counts[1:]:
        ours, raw = [], []
        for _ in range(REPEATS):
            ours.append(ddptui_allreduce(nproc))
            raw.append(raw_allreduce(nproc))
        lines += [
            f"## All-reduce busbw, {nproc} GPUs (GB/s)",
            "",
            "| size | ddptui (trainer/allreduce_bench.py) | raw loop (torchrun) | ratio |",
            "|---:|---:|---:|---:|",
        ]
        for size in SIZES:
            a = statistics.median(r[size] for r in ours)
            b = statistics.median(r[size] for r in raw)
            lines.append(f"| {size // MiB} MiB | {a:.1f} | {b:.1f} | {a / b:.3f} |")
        lines.append("")
    lines += [
        "## DDP throughput through ddptui (samples/s, all ranks summed)",
        "",
        "| GPUs | cpu_ddp.py | scaling eff. | elastic_ddp.py | scaling eff. |",
        "|---:|---:|---:|---:|---:|",
    ]
    base: tuple[float, float] | None = None
    for nproc in counts:
        cpu = statistics.median(
            throughput(
                nproc,
                "cpu_ddp.py",
                [
                    "20",
                    "100",
                    "--checkpoint_path",
                    f"/tmp/ddptui-bench-{nproc}-{i}.pt",
                    "--dataset_size",
                    "65536",
                    "--batch_size",
                    "256",
                ],
                r"Throughput: ([\d.]+) samples/s",
            )
            for i in range(REPEATS)
        )
        toy = statistics.median(
            throughput(
                nproc, "elastic_ddp.py", ["--steps", "2000"], r"throughput: ([\d.]+) samples/s"
            )
            for _ in range(REPEATS)
        )
        base = base or (cpu, toy)
        lines.append(
            f"| {nproc} | {cpu:.0f} | {cpu / (base[0] * nproc):.2f} | {toy:.0f} | "
            f"{toy / (base[1] * nproc):.2f} |"
        )
    lines.append("")
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
