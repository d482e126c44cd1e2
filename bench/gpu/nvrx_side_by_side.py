"""NVRx's straggler detection beside ddptui's, on the same NCCL job and the same slow rank.

On a machine with 2+ GPUs and nvidia-resiliency-ext 0.7.0 installed:
`python bench/gpu/nvrx_side_by_side.py OUT_DIR [--nproc 2]`.

1. NVRx: bench/gpu/nvrx_ddp.py (the straggler tests' loop, its step wrapped in NVRx's
   detection sections as its usage guide says) under plain torchrun, once with NVRx and once
   without (`--off`): which rank its reports name, how many seconds after the start, and its
   cost as the step time's change.
2. ddptui: the unmodified tests/data/straggler/slow_rank_ddp.py under `ddptui run
   --headless` with the same arguments: which rank its first `straggler` event names, how
   many seconds after the ranks began to run; its cost is bench/straggler/cost.py's.

Writes OUT_DIR/nvrx_side_by_side.md (the table) and .json, and prints the table.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "data" / "straggler" / "slow_rank_ddp.py"
NVRX_JOB = ROOT / "bench" / "gpu" / "nvrx_ddp.py"


def _cupti_dirs() -> list[str]:
    """Where a libcupti lies (CUDA's own tree or the CUDA wheels beside torch): NVRx's CUDA
    profiling module loads it."""
    roots = [Path(p) for p in sys.path if p.endswith("site-packages")]
    roots += [Path(p) for p in glob.glob("/usr/local/cuda*")]
    found = {str(lib.parent) for root in roots for lib in root.glob("**/libcupti.so*")}
    return sorted(found)


def torchrun(nproc: int, script: Path, job: list[str]) -> tuple[float, list[str]]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv += [f"--nproc-per-node={nproc}", str(script), *job]
    libs = ":".join([*_cupti_dirs(), os.environ.get("LD_LIBRARY_PATH", "")])
    env = {**os.environ, "LD_LIBRARY_PATH": libs}
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, check=False, env=env)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
    return began, done.stdout.splitlines()


def nvrx_case(nproc: int, job: list[str]) -> dict:
    _, lines = torchrun(nproc, NVRX_JOB, job)
    reports = [json.loads(x[5:]) for x in lines if x.startswith("NVRX ")]
    step = next((json.loads(x[7:]) for x in lines if x.startswith("STEP_S ")), {})
    first = next((r for r in reports if r["named"]), None)
    _, off = torchrun(nproc, NVRX_JOB, [*job, "--off"])
    plain = next((json.loads(x[7:]) for x in off if x.startswith("STEP_S ")), {})
    cost = None
    if step.get("median") and plain.get("median"):
        cost = (step["median"] - plain["median"]) / plain["median"]
    return {
        "named": first["named"] if first else [],
        "after_s": first["t"] if first else None,
        "after_step": first["step"] if first else None,
        "step_s": step.get("median"),
        "step_s_off": plain.get("median"),
        "cost": cost,
        "reports": reports,
        "code_change": "yes: Detector.initialize, a detection_section per section, "
        "generate_report every N steps",
    }


def ddptui_case(nproc: int, job: list[str]) -> dict:
    state = Path(tempfile.mkdtemp(prefix="ddptui-nvrx-"))
    env = {**os.environ, "DDPTUI_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "ddptui.cli", "run", "--headless", "--nodes", "1"]
    argv += ["--nproc-per-node", str(nproc), str(SCRIPT), *job]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    events = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    running = [e["ts"] for e in events if e["event"] == "rank" and e["state"] == "running"]
    said = [e for e in events if e["event"] == "straggler" and e["ranks"]]
    first = said[0] if said else None
    shutil.rmtree(state, ignore_errors=True)
    return {
        "named": first["ranks"] if first else [],
        "after_s": round(first["ts"] - min(running), 1) if first and running else None,
        "scores": first["scores"] if first else {},
        "method": first["method"] if first else "",
        "evidence": first["evidence"] if first else [],
        "code_change": "none (the worker hook samples the flight recorder)",
        "summary_ok": events[-1].get("ok") if events else None,
    }


def table(nvrx: dict, ours: dict, cost_line: str) -> str:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:+.2f}% of step time"

    rows = [
        "| | NVRx 0.7.0 (sections wrapped) | ddptui (unmodified job) |",
        "|---|---|---|",
        f"| rank named | {nvrx['named']} | {ours['named']} |",
        f"| seconds to first naming | {nvrx['after_s']} (step {nvrx['after_step']}) "
        f"| {ours['after_s']} (method {ours['method']}) |",
        f"| cost | {pct(nvrx['cost'])} (median step {nvrx['step_s']} s vs "
        f"{nvrx['step_s_off']} s off) | {cost_line} |",
        f"| code change | {nvrx['code_change']} | {ours['code_change']} |",
    ]
    return "\n".join(rows) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--cost", default="", help="bench/straggler/cost.py's summary line")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    job = ["--steps", str(args.steps), "--step-s", "0.1", "--slow-rank", "1", "--slow", "1.4"]
    job += ["--width", "2048"]
    try:
        from nvidia_resiliency_ext.attribution import straggler  # noqa: F401
    except ImportError as exc:
        print(f"NVRx does not import: {exc}", file=sys.stderr)
        nvrx = {"named": "not installed", "after_s": None, "after_step": None, "cost": None}
        nvrx |= {"step_s": None, "step_s_off": None, "code_change": "-", "reports": []}
    else:
        nvrx = nvrx_case(args.nproc, job)
    ours = ddptui_case(args.nproc, job)
    text = table(nvrx, ours, args.cost or "see straggler_cost.txt (interleaved on/off)")
    (args.out / "nvrx_side_by_side.md").write_text(text)
    (args.out / "nvrx_side_by_side.json").write_text(
        json.dumps({"job": job, "nproc": args.nproc, "nvrx": nvrx, "ddptui": ours}, indent=1)
    )
    print(text)
    for line in ours["evidence"]:
        print("   ddptui:", line)


if __name__ == "__main__":
    main()
