"""Rank argv[1] asks for far more GPU memory than there is."""

import os
import sys

import torch

rank = int(os.environ["RANK"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
os.write(1, f"rank={rank} step=1\n".encode())
if rank == int(sys.argv[1]):
    torch.empty(1 << 40, dtype=torch.float32, device="cuda")
os.write(1, f"rank={rank} step=2\n".encode())
