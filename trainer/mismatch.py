"""A collective mismatch on purpose, for the collective audit's tests.

    --odd-rank R    from step --from on, rank R all-reduces a tensor twice the size the others
                    pass (gloo aborts a rank that receives the odd size; NCCL says nothing and
                    the results are wrong)
    --steps N       steps to run (default 400), --sleep S seconds between them (default 0.2)

Each rank prints `mismatch rank=R step=N` per step. NCCL on GPUs (one per local rank), else gloo.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--odd-rank", type=int, default=1)
    p.add_argument("--from", dest="start", type=int, default=5)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--numel", type=int, default=1024)
    p.add_argument("--sleep", type=float, default=0.2)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = "cuda" if cuda else "cpu"
    for step in range(args.steps):
        odd = rank == args.odd_rank and step >= args.start
        tensor = torch.ones(args.numel * (2 if odd else 1), device=device)
        dist.all_reduce(tensor)
        if cuda:
            torch.cuda.synchronize()
        os.write(1, f"mismatch rank={rank} step={step}\n".encode())
        time.sleep(args.sleep)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
