"""Prints `[RANK r] Epoch N | Batchsize: 32 | Steps: 8` lines; rank argv[1] runs 4x slower."""

import os
import sys
import time

rank = int(os.environ["RANK"])
delay = 0.2 * (4 if rank == int(sys.argv[1]) else 1)
for epoch in range(int(sys.argv[2]) if len(sys.argv) > 2 else 30):
    os.write(1, f"[RANK {rank}] Epoch {epoch} | Batchsize: 32 | Steps: 8\n".encode())
    time.sleep(delay)
