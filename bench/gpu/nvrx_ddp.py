"""The straggler tests' DDP loop with NVRx's straggler detection wrapped around its step.

As NVRx's usage guide says: `straggler.Detector.initialize(...)` once, each section of the
step inside `straggler.Detector.detection_section(name, profile_cuda=...)`, and
`generate_report()` on every rank every `--report-every` steps (a collective: every rank
calls it); rank 0 prints one line a report, `NVRX {json}`, with the ranks it names and when.
The job and its slow rank are tests/data/straggler/slow_rank_ddp.py's (same arguments), so
ddptui's zero-code scores on that unmodified script compare with these.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

try:  # 0.7 keeps it under `attribution`; older releases at the top
    from nvidia_resiliency_ext.attribution import straggler
except ImportError:
    from nvidia_resiliency_ext import straggler  # type: ignore[no-redef]
from torch.nn.parallel import DistributedDataParallel as DDP

THRESHOLD = 0.75  # NVRx's default


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-s", type=float, default=0.1)
    p.add_argument("--slow-rank", type=int, action="append", default=[])
    p.add_argument("--slow", type=float, default=1.4)
    p.add_argument("--extra-s", type=float, default=0.0)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--report-every", type=int, default=20)
    p.add_argument("--off", action="store_true", help="no NVRx: the same loop, for its cost")
    args = p.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    if not args.off:
        straggler.Detector.initialize(
            scores_to_compute=["relative_perf_scores", "individual_perf_scores"],
            gather_on_rank0=True,
        )
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width),
    ).to(device)
    ddp = DDP(model, device_ids=[device.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(32, args.width, device=device)
    start = time.perf_counter()
    steps_s: list[float] = []
    for step in range(args.steps):
        began = time.perf_counter()
        pause = args.step_s
        if rank in args.slow_rank:
            pause = pause * args.slow + args.extra_s
        if args.off:
            time.sleep(pause)
            loss = ddp(x).pow(2).mean()
        else:
            with straggler.Detector.detection_section("data", profile_cuda=False):
                time.sleep(pause)  # the loop's work off the model: data, augmentation
            with straggler.Detector.detection_section("fwd", profile_cuda=True):
                loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        steps_s.append(time.perf_counter() - began)
        if not args.off and step % args.report_every == args.report_every - 1:
            report = straggler.Detector.generate_report()
            if rank == 0 and report is not None:
                named = report.identify_stragglers(
                    gpu_rel_threshold=THRESHOLD, section_rel_threshold=THRESHOLD
                )
                line = {
                    "t": round(time.perf_counter() - start, 2),
                    "step": step,
                    "named": sorted(
                        {s.rank for found in named.values() for v in _sets(found) for s in v}
                    ),
                    "gpu_relative": _plain(report.gpu_relative_perf_scores),
                    "section_relative": _plain(report.section_relative_perf_scores),
                }
                print("NVRX " + json.dumps(line), flush=True)
    if rank == 0:
        steps_s.sort()
        print("STEP_S " + json.dumps({"median": steps_s[len(steps_s) // 2]}), flush=True)
    if not args.off:
        straggler.Detector.shutdown()
    dist.barrier()
    dist.destroy_process_group()


def _sets(found: object) -> list:
    """identify_stragglers' values: a set of StragglerId, or a section -> set mapping."""
    return list(found.values()) if isinstance(found, dict) else [found]


def _plain(scores: object) -> object:
    if isinstance(scores, dict):
        return {str(k): _plain(v) for k, v in scores.items()}
    return round(float(scores), 3) if isinstance(scores, int | float) else str(scores)


if __name__ == "__main__":
    main()
