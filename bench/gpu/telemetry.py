"""Provides the GPU telemetry runs on a GPU machine, in one go, and their captures.

    python bench/gpu/telemetry.py OUT_DIR [--rounds 3] [--train-s 30]

1. Captures for the CI tests (tests/data/gpu/): `nvidia-smi --query-gpu=<the sampler's
   fields>` idle and as an `-lms` loop under training, `--query-compute-apps` busy, and the
   workers' LOCAL_RANK / RANK / CUDA_VISIBLE_DEVICES, in the sampler's own field order.
2. The sampler's cost: trainer/elastic_ddp.py through `ddptui run --headless --nodes 1
   --nproc-per-node G`, sampler on (1 s) and off (0), interleaved, `--rounds` each; training
   samples/s per run (the mean of the ranks' own throughput lines).
3. The run with telemetry: elastic_ddp.py for about `--train-s` seconds (steps from the cost
   runs' rate), its JSON lines kept; checks: gpu events with plausible values, each rank on
   its own GPU, teardown proof with the GPUs free.
4. An NCCL hang: trainer/hang.py --skip-rank 1; waits for the `busy_no_progress` flag (rank
   0's GPU spins in the all_reduce rank 1 never joins) and rank 1's `idle`, then stops it.
5. An SVG of the console from a Pilot run (bench/gpu/console_svg.py), if the console's
   dependencies are there.

Writes OUT_DIR/summary.json and the files above. Without a GPU it runs the same on CPU
(gloo, no gpu events) and says so: that is how it is tested before a GPU run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
QUERY = "index,uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
THROUGHPUT = re.compile(r"throughput: ([\d.]+) samples/s")
EPOCH_RATE = re.compile(r"epoch=(\d+)/\d+ .* samples/s=([\d.]+)")  # cifar10_vgg.py
CIFAR_EPOCHS, CIFAR_WARM = 8, 2  # epochs a cost run; the first ones (cuDNN tuning) not counted


def sh(*argv: str, timeout: float = 30) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"
    return done.stdout + done.stderr


def gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    return len([ln for ln in sh("nvidia-smi", "--list-gpus").splitlines() if ln.startswith("GPU")])


def headless(
    out: Path, name: str, args: list[str], stop_when: Any = None, limit_s: float = 300
) -> list[dict]:
    """`ddptui run --headless ARGS`; its JSON lines in OUT/NAME.jsonl. `stop_when(event,
    events)` true: SIGINT (the operator's stop), and the rest is read until it ends."""
    state = Path(tempfile.mkdtemp(prefix="ddptui-gpu-tel-"))
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless", *args]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
    )
    assert proc.stdout is not None
    events: list[dict] = []
    deadline = time.monotonic() + limit_s
    stopped = False
    for line in proc.stdout:
        if line.startswith("{"):
            events.append(json.loads(line))
        if not stopped and (
            (stop_when is not None and events and stop_when(events[-1], events))
            or time.monotonic() > deadline
        ):
            proc.send_signal(signal.SIGINT)
            stopped = True
    proc.wait(timeout=120)
    (out / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (out / f"{name}.stderr").write_text(proc.stderr.read() if proc.stderr else "")
    run_dir = next((e["run_dir"] for e in events if e["event"] == "summary"), None)
    if run_dir:
        logs = sorted(Path(run_dir).glob("nodes/*.log"))
        (out / f"{name}.node.log").write_text("".join(p.read_text()[-200_000:] for p in logs))
    shutil.rmtree(state, ignore_errors=True)
    return events


def throughput(events: list[dict], run_dir_text: str) -> float | None:
    """elastic_ddp's ranks' throughput lines, or cifar10_vgg's epochs after the warm ones:
    the mean per rank."""
    rates = [float(m) for m in THROUGHPUT.findall(run_dir_text)]
    rates += [float(r) for e, r in EPOCH_RATE.findall(run_dir_text) if int(e) > CIFAR_WARM]
    return statistics.mean(rates) if rates else None


def cifar_args(nproc: int, sample_ms: int) -> list[str]:
    return [
        "--nodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--gpu-sample-ms",
        str(sample_ms),
        str(ROOT / "trainer" / "cifar10_vgg.py"),
        "--epochs",
        str(CIFAR_EPOCHS),
        "--batch-size",
        "256",
        "--samples",
        "50000",
    ]


def train_args(nproc: int, steps: int, sample_ms: int) -> list[str]:
    return [
        "--nodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--gpu-sample-ms",
        str(sample_ms),
        str(ROOT / "trainer" / "elastic_ddp.py"),
        "--steps",
        str(steps),
    ]


def cost(out: Path, nproc: int, rounds: int, steps: int, trainer: str = "elastic") -> dict:
    """Sampler on / off, interleaved: training samples/s of each run."""
    runs: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(rounds):
        for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
            name = f"cost_{mode}_{i}"
            ms = 1000 if mode == "on" else 0
            argv = cifar_args(nproc, ms) if trainer == "cifar10" else train_args(nproc, steps, ms)
            events = headless(out, name, argv)
            rate = throughput(events, (out / f"{name}.node.log").read_text())
            gpu_events = sum(e["event"] == "gpu" for e in events)
            print(f"cost {name}: {rate} samples/s, {gpu_events} gpu events", flush=True)
            if rate:
                runs[mode].append(rate)
    on, off = runs["on"], runs["off"]
    ratio = statistics.median(on) / statistics.median(off) if on and off else None
    return {"trainer": trainer, "steps": steps, "on": on, "off": off, "on_over_off": ratio}


def captures(out: Path, nproc: int) -> None:
    """nvidia-smi in the sampler's field order, idle; the busy ones come with the main run."""
    cap = out / "capture"
    cap.mkdir(exist_ok=True)
    (cap / "query_idle.csv").write_text(
        sh("nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits")
    )
    (cap / "apps_idle.csv").write_text(
        sh(
            "nvidia-smi",
            "--query-compute-apps=pid,gpu_uuid,used_memory",
            "--format=csv,noheader,nounits",
        )
    )
    (cap / "nvidia_smi_version.txt").write_text(sh("nvidia-smi", "--version"))


def busy_captures(out: Path) -> None:
    cap = out / "capture"
    (cap / "query_busy_lms.csv").write_text(
        sh(
            "timeout",
            "4",
            "nvidia-smi",
            f"--query-gpu={QUERY}",
            "--format=csv,noheader,nounits",
            "-lms",
            "500",
            timeout=10,
        )
    )
    (cap / "apps_busy.csv").write_text(
        sh(
            "nvidia-smi",
            "--query-compute-apps=pid,gpu_uuid,used_memory",
            "--format=csv,noheader,nounits",
        )
    )
    loops = []
    for pid in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "nvidia-smi" in cmd and "-lms=" in cmd:
            loops.append(cmd)
    # the sampler reads NVML when it can: then no nvidia-smi loop runs
    (cap / "sampler_source.txt").write_text(
        ("nvidia-smi loop: " + "; ".join(loops)) if loops else "NVML (no nvidia-smi loop running)"
    )
    lines = []
    for pid in os.listdir("/proc"):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(e.startswith(b"DDPTUI_TAG=") for e in env):
            continue
        keep = [
            e.decode()
            for e in env
            if e.split(b"=")[0] in (b"LOCAL_RANK", b"RANK", b"CUDA_VISIBLE_DEVICES")
        ]
        if keep:
            lines.append(f"{pid} {' '.join(sorted(keep))}")
    (cap / "env_busy.txt").write_text("\n".join(lines) + "\n")


def check_main(events: list[dict], ngpu: int) -> dict:
    gpu = [e for e in events if e["event"] == "gpu"]
    mapped = [e for e in gpu if all(g["ranks"] for g in e["gpus"])]
    last = mapped[-1]["gpus"] if mapped else []
    teardown = [e for e in events if e["event"] == "teardown"]
    utils = [g["util"] for e in gpu for g in e["gpus"] if g["util"] is not None]
    mems = [g["mem_used_mib"] for e in gpu for g in e["gpus"] if g["mem_used_mib"] is not None]
    return {
        "gpu_events": len(gpu),
        "gpus": len(gpu[0]["gpus"]) if gpu else 0,
        "ranks_by_gpu": [[g["index"], g["ranks"]] for g in last],
        "ranks_right": [g["ranks"] for g in last] == [[i] for i in range(ngpu)],
        "util_max": max(utils, default=None),
        "mem_used_max_mib": max(mems, default=None),
        "mem_total_mib": gpu[0]["gpus"][0]["mem_total_mib"] if gpu else None,
        "power_w_max": max((g["power_w"] or 0 for e in gpu for g in e["gpus"]), default=None),
        "temp_c_max": max((g["temp_c"] or 0 for e in gpu for g in e["gpus"]), default=None),
        "flags": sorted({f["kind"] for e in gpu for f in e["flags"]}),
        "teardown": [
            {"clean": t["clean"], "detail": t["detail"], "gpu": t.get("gpu")} for t in teardown
        ],
        "ok": events[-1].get("ok") if events else None,
    }


def hang_run(out: Path, nproc: int, limit_s: float) -> dict:
    seen: dict[str, Any] = {}

    def flagged(event: dict, events: list[dict]) -> bool:
        if event["event"] == "gpu":
            for f in event["flags"]:
                seen.setdefault((f["kind"], f["rank"]), (event["ts"], f["detail"]))
        has = {k for k, _ in seen}
        return "busy_no_progress" in has and "idle" in has

    args = [
        "--nodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "--hang-timeout",
        "60",
        str(ROOT / "trainer" / "hang.py"),
        "--skip-rank",
        "1",
        "--steps",
        "5",
    ]
    events = headless(out, "hang", args, flagged, limit_s)
    first_gpu = next((e["ts"] for e in events if e["event"] == "gpu"), None)
    return {
        "flags": [
            {
                "kind": k,
                "rank": r,
                "after_first_sample_s": round(ts - (first_gpu or ts), 1),
                "detail": d,
            }
            for (k, r), (ts, d) in sorted(seen.items(), key=lambda kv: kv[1][0])
        ],
        "teardown": [t["detail"] for t in events if t["event"] == "teardown"],
    }


def versions() -> dict:
    torch = sh(
        sys.executable,
        "-c",
        "import torch;print(torch.__version__, torch.version.cuda, "
        "torch.cuda.nccl.version() if torch.cuda.is_available() else '')",
    ).strip()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": platform.python_version(),
        "torch_cuda_nccl": torch,
        "gpus": sh(
            "nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"
        ).strip(),
        "cpus": os.cpu_count(),
        "nvml": sh(
            sys.executable,
            "-c",
            "import pynvml; print('nvidia-ml-py', getattr(pynvml, '__version__', 'present'))",
        ).strip(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--train-s", type=float, default=30.0)
    p.add_argument("--cost-steps", type=int, default=2000, help="the fewest steps a run")
    p.add_argument("--cost-s", type=float, default=8.0, help="training seconds a cost run")
    p.add_argument("--cost-trainer", choices=["elastic", "cifar10"], default="elastic")
    p.add_argument("--skip", action="append", default=[], help="cost, main, hang, svg")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ngpu = gpu_count()
    nproc = ngpu or 2
    summary: dict[str, Any] = {"versions": versions(), "gpus": ngpu}
    print(json.dumps(summary["versions"]), flush=True)
    if ngpu:
        captures(out, nproc)
    steps_per_s = 100.0
    if args.cost_trainer == "elastic":
        # one run to learn the step rate (elastic_ddp: 20 samples a step), not counted
        events = headless(out, "calibrate", train_args(nproc, args.cost_steps, 0))
        rate = throughput(events, (out / "calibrate.node.log").read_text())
        steps_per_s = (rate or 2000) / 20
        summary["calibrate_samples_per_s"] = rate
    if "cost" not in args.skip:
        steps = max(args.cost_steps, int(steps_per_s * args.cost_s))
        summary["cost"] = cost(out, nproc, args.rounds, steps, args.cost_trainer)
        print("cost:", json.dumps(summary["cost"]), flush=True)
    if "main" not in args.skip:
        steps = int((steps_per_s or 100) * args.train_s)
        busy: dict[str, bool] = {}
        threads: list[threading.Thread] = []

        def capture_busy(event: dict, events: list[dict]) -> bool:
            running = sum(e["event"] == "rank" and e["state"] == "running" for e in events)
            samples = sum(e["event"] == "gpu" for e in events)
            if ngpu and running >= nproc and not busy and samples > 8:
                busy["done"] = True
                threads.append(threading.Thread(target=busy_captures, args=(out,)))
                threads[-1].start()
            return False

        events = headless(out, "telemetry", train_args(nproc, steps, 1000), capture_busy)
        for thread in threads:
            thread.join()
        summary["main"] = {"steps": steps, **check_main(events, ngpu)}
        print("main:", json.dumps(summary["main"]), flush=True)
    if "hang" not in args.skip:
        summary["hang"] = hang_run(out, nproc, 120 if ngpu else 45)
        print("hang:", json.dumps(summary["hang"]), flush=True)
    if "svg" not in args.skip:
        svg = ROOT / "bench" / "gpu" / "console_svg.py"
        if svg.exists():
            summary["svg"] = sh(sys.executable, str(svg), str(out / "console.svg"), timeout=240)[
                -2000:
            ]
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print("done", flush=True)


if __name__ == "__main__":
    main()
