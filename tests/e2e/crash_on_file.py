"""A DDP job (gloo, CPU) whose rank `--rank` raises once the file `--when` exists.

Lets a test decide when the crash comes: every rank joins, all-reduces, then prints a
heartbeat every 0.2 s until the file appears (or `--limit` seconds pass).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, default=3)
    p.add_argument("--when", required=True)
    p.add_argument("--limit", type=float, default=180.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank={rank} joined world={int(t.item())}", flush=True)
    start, beat = time.monotonic(), 0
    while time.monotonic() - start < args.limit:
        if rank == args.rank and os.path.exists(args.when):
            raise RuntimeError(f"crash_on_file: rank {rank} fails as asked")
        beat += 1
        print(f"rank={rank} heartbeat={beat}", flush=True)
        time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
