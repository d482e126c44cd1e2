"""NCCL: rank argv[1] stops after the first all_reduce; the others' second one times out (10 s)."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", timeout=timedelta(seconds=10))
rank = dist.get_rank()
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
os.write(1, f"rank={rank} step=1\n".encode())
if rank == int(sys.argv[1]):
    time.sleep(90)
dist.all_reduce(t)
torch.cuda.synchronize()
os.write(1, f"rank={rank} step=2\n".encode())
