"""Failures as the story table needs them, each in the words a real run prints. Run it under
torchrun (gloo on CPU).

    --oom R        rank R raises what PyTorch raises when a GPU's memory runs out
    --nan R        rank R prints `loss: X` with no step, its 5th report NaN; the job finishes
    --steps N      all-reduces before the end (each after 0.2 s)
    --env-on R NAME=VALUE   rank R sets NAME in its environment before init_process_group,
                   as a script may (the others do not); the job finishes
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist

OOM = (
    "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.11 GiB "
    "of which 3.19 GiB is free. Of the allocated memory 74.20 GiB is allocated by PyTorch"
)


def say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--oom", type=int)
    p.add_argument("--nan", type=int)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--env-on", nargs=2, metavar=("RANK", "NAME=VALUE"))
    args = p.parse_args()
    if args.env_on and os.environ.get("RANK") == args.env_on[0]:
        name, _, value = args.env_on[1].partition("=")
        os.environ[name] = value
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tensor = torch.ones(16)
    for step in range(args.steps):
        time.sleep(0.2)
        dist.all_reduce(tensor)
        if rank == args.oom and step == 2:
            raise torch.OutOfMemoryError(OOM)
        if rank == args.nan:
            say(f"loss: {'nan' if step == 4 else f'{1.0 / (step + 1):.4f}'}")
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)  # gloo's threads at interpreter exit (TESTBED.md)


if __name__ == "__main__":
    main()
