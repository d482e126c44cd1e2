"""Rank argv[1] kills itself with SIGKILL after two steps (as the OOM killer ends a rank)."""

import os
import signal
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 4):
    os.write(1, f"rank={rank} step={step}\n".encode())
    time.sleep(0.5)
    if rank == int(sys.argv[1]) and step == 2:
        os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
