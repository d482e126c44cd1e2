"""A plain DDP loop in which chosen ranks take longer per step: a straggler to be found.

Every rank runs a small MLP forward and backward on a fixed batch and sleeps ``--step-s``
(its share of work not on the model: data, augmentation); the ranks of ``--slow-rank`` sleep
``--slow`` times longer, from step ``--slow-from`` until ``--slow-until``. Nothing in it
knows of any detector: the gradient all-reduce of DDP is the only collective. Runs with
torchrun on gloo (CPU) or NCCL (one GPU per rank).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-s", type=float, default=0.1, help="each rank's sleep a step")
    p.add_argument("--slow-rank", type=int, action="append", default=[])
    p.add_argument("--slow", type=float, default=1.4, help="the slow ranks' sleep, times")
    p.add_argument("--extra-s", type=float, default=0.0, help="the slow ranks' extra sleep")
    p.add_argument("--slow-from", type=int, default=0)
    p.add_argument("--slow-until", type=int, default=1 << 30)
    p.add_argument("--width", type=int, default=256)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width),
        torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width),
    ).to(device)
    ddp = DDP(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(32, args.width, device=device)
    start = time.perf_counter()
    for step in range(args.steps):
        pause = args.step_s
        if rank in args.slow_rank and args.slow_from <= step < args.slow_until:
            pause = pause * args.slow + args.extra_s
        time.sleep(pause)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == args.steps - 1:
            took = time.perf_counter() - start
            msg = f"rank {rank} step {step} loss {loss.item():.4f} elapsed {took:.3f}s\n"
            os.write(1, msg.encode())
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main()
