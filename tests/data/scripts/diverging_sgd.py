"""A tiny DDP regression trained with a learning rate of 1e9: its loss overflows to inf, then
NaN, within a few steps, as a mistyped learning rate does. It ends with the guard many
training scripts carry (a non-finite final loss is an error). Run it under torchrun."""

from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS = 12


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e9)
    inputs, targets = torch.randn(64, 8), torch.randn(64, 1)
    loss = torch.tensor(0.0)
    for step in range(1, STEPS + 1):
        loss = ((model(inputs) - targets) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        os.write(1, f"rank {rank} step={step} loss={loss.item():.6f}\n".encode())
    if not math.isfinite(loss.item()):
        raise FloatingPointError(f"the loss is {loss.item()} after {STEPS} steps")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
