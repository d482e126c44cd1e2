"""PyTorch's "basic DDP example" (elastic_ddp.py), runnable on GPUs or CPU.

ToyModel (Linear(10,10) -> ReLU -> Linear(10,5)) under DDP, a few SGD steps
of MSE loss on random data. NCCL with device = LOCAL_RANK on GPUs, gloo on CPU.
Output::

    Start running basic DDP example on rank N.
    rank N step=K loss=X.XXXXXX            (one per step, K from 1)
    rank N finished
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

BATCH = 20


class ToyModel(nn.Module):
    """The example's model: small enough that the run measures the plumbing."""

    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net2(self.relu(self.net1(x)))
        return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10, help="optimizer steps (default: 10)")
    p.add_argument(
        "--step-time",
        type=float,
        default=0.0,
        help="seconds to sleep after each step, so a run lasts long enough to lose a node",
    )
    args = p.parse_args(argv)
    if args.steps < 0:
        p.error("--steps must be >= 0")
    return args


def main() -> int:
    args = parse_args()
    d = _dist.setup(elastic=True)  # a rank of any round of an elastic job (round_store)
    rank = d.ident.rank
    _dist.say(f"Start running basic DDP example on rank {rank}.")
    model = ToyModel().to(d.device)
    ddp_model = DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.001)
    gen = torch.Generator().manual_seed(rank)  # different data per rank, reproducible
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(BATCH, 10, generator=gen).to(d.device))
        labels = torch.randn(BATCH, 5, generator=gen).to(d.device)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
        _dist.say(f"rank {rank} step={step} loss={loss.item():.6f}")
        if args.step_time:
            time.sleep(args.step_time)
    if d.device.type == "cuda":
        torch.cuda.synchronize(d.device)
    secs = time.perf_counter() - start
    if args.steps:
        _dist.say(
            f"rank {rank} throughput: {args.steps * BATCH / secs:.1f} samples/s "
            f"({args.steps} steps in {secs:.3f} s)"
        )
    _dist.say(f"rank {rank} finished")
    return 0


if __name__ == "__main__":
    _dist.run_main(main)
