"""Provides the baseline of the GPU all-reduce benchmark: a bare torch.distributed loop.

Started with plain torchrun (no ddptui, no trainer helpers), it times all_reduce exactly as
trainer/allreduce_bench.py does (same sizes, warm-up, iterations, slowest rank's mean), so
the two busbw columns compare the launcher and nothing else.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    iters, warmup = int(sys.argv[1]), int(sys.argv[2])
    sizes = [int(s) for s in sys.argv[3].split(",")]
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world, rank = dist.get_world_size(), dist.get_rank()
    rows = []
    for nbytes in sizes:
        t = torch.zeros(nbytes // 4, dtype=torch.float32, device="cuda")
        for _ in range(warmup):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        elapsed = torch.tensor(
            [(time.perf_counter() - start) / iters], device="cuda", dtype=torch.float64
        )
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        algbw = nbytes / float(elapsed.item()) / 1e9
        rows.append({"bytes": nbytes, "busbw_gbps": algbw * 2 * (world - 1) / world})
    if rank == 0:
        print("RAW_RESULT " + json.dumps(rows), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
