"""Provides the CPU the node's GPU sampler takes, per sample, in the node helper's process.

    python bench/gpu/sampler_cpu.py [--seconds 20] [--ms 1000]

Runs GpuSampler for `--seconds` and prints the helper process's own CPU time (user + system,
all its threads; the nvidia-smi loop's own CPU is the child's and is printed apart) per sample.
Without a GPU it uses the stand-in nvidia-smi (testbed/fake_gpu/) replaying a capture:
the helper's side (reading the loop, grouping, the /proc look for the job's workers, JSON) is
what is measured then; with a GPU and nvidia-ml-py, NVML's reads.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ddptui.core.node.gpu_sampler import GpuSampler, has_gpu_tools  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--ms", type=int, default=1000)
    args = p.parse_args()
    source = "this machine's GPUs"
    if not has_gpu_tools():
        smi = Path(tempfile.mkdtemp(prefix="ddptui-smi-"))
        shutil.copytree(ROOT / "tests" / "data" / "gpu" / "standin", smi, dirs_exist_ok=True)
        os.environ["FAKE_SMI_DIR"] = str(smi)
        os.environ["PATH"] = f"{ROOT / 'testbed' / 'fake_gpu'}{os.pathsep}{os.environ['PATH']}"
        os.environ["DDPTUI_GPU_SOURCE"] = "smi"
        source = "the stand-in nvidia-smi (no GPU here)"
    sent: list[bytes] = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    sampler = GpuSampler("DDPTUI_TAG", "bench", args.ms, sent.append)
    sampler.start()
    time.sleep(args.seconds)
    sampler.stop()
    after = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    per = cpu / max(1, len(sent))
    print(f"source: {source}; {len(sent)} samples in {args.seconds:.0f} s at {args.ms} ms")
    print(
        f"helper CPU: {cpu * 1000:.1f} ms in all, {per * 1000:.2f} ms a sample, "
        f"{cpu / args.seconds * 100:.3f}% of one core"
    )
    print(
        f"nvidia-smi loop (child) CPU: {(children.ru_utime + children.ru_stime) * 1000:.1f} ms; "
        f"bytes sent {sum(map(len, sent))} ({sum(map(len, sent)) / max(1, len(sent)):.0f} a sample)"
    )


if __name__ == "__main__":
    main()
