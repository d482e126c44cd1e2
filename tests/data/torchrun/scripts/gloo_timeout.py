"""Rank argv[1] stops taking part in collectives; the others' all_reduce times out after 5 s."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=5))
rank = dist.get_rank()
os.write(1, f"rank={rank} step=1\n".encode())
if rank == int(sys.argv[1]):
    time.sleep(60)
t = torch.ones(1)
dist.all_reduce(t)
os.write(1, f"rank={rank} step=2\n".encode())
