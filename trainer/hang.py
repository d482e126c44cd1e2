"""Hangs on purpose, for stall tests: the ways a job goes silent, one flag each.

    --sleep-rank R   rank R sleeps in time.sleep; the others wait in all_reduce (all stop)
    --deadlock       the lower half waits in an all_reduce of the world group, the upper half
                     in an all_reduce of a second group over the same ranks: neither finishes
    --skip-rank R    rank R skips the last of --steps all_reduces, then waits in a sleep;
                     the others wait in that all_reduce (collective N never entered by R)
    --pg-timeout S   collectives time out after S seconds (the watchdog's timeout); with
                     --linger a rank whose collective timed out prints the error and sleeps,
                     as a rank does while its watchdog dumps, instead of exiting at once

Each rank prints `hang rank=R step=N` while it progresses, then nothing. NCCL on GPUs
(one per local rank), else gloo.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist


def say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def sleep_forever() -> None:
    time.sleep(3600)  # the line the stacks show for a sleeping rank


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sleep-rank", type=int)
    p.add_argument("--skip-rank", type=int)
    p.add_argument("--deadlock", action="store_true")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--numel", type=int, default=1024)
    p.add_argument("--pg-timeout", type=float)
    p.add_argument("--linger", action="store_true")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    timeout = datetime.timedelta(seconds=args.pg_timeout) if args.pg_timeout else None
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.ones(args.numel, device="cuda" if cuda else "cpu")
    second = dist.new_group(list(range(world))) if args.deadlock else None
    for step in range(args.steps):
        if step == args.steps - 1 and rank == args.skip_rank:
            say(f"hang rank={rank} step={step} skips all_reduce")
            if cuda:
                torch.cuda.synchronize()
            sleep_forever()
        try:
            dist.all_reduce(tensor)
            if cuda:
                torch.cuda.synchronize()
        except RuntimeError:
            if not args.linger:
                raise
            os.write(2, traceback.format_exc().encode())
            sys.stderr.flush()
            sleep_forever()
        say(f"hang rank={rank} step={step}")
    if rank == args.sleep_rank:
        say(f"hang rank={rank} sleeps")
        sleep_forever()
    if args.deadlock and rank < world // 2:
        dist.all_reduce(tensor)
    elif args.deadlock:
        dist.all_reduce(tensor, group=second)
    dist.all_reduce(tensor)
    if cuda:
        torch.cuda.synchronize()
    say(f"hang rank={rank} done")
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


if __name__ == "__main__":
    main()
