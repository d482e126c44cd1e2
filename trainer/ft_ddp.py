"""A small fault-tolerant DDP trainer for torchft: one replica group per torchrun.

Each replica group is its own torchrun (its own world); the groups meet through torchft's
Lighthouse (`TORCHFT_LIGHTHOUSE`) and all-reduce gradients across the groups that are in the
current quorum. A group that dies and comes back heals from a live peer (its model and
optimizer state sent over), while the others keep stepping. ddptui sets `REPLICA_GROUP_ID`
and `NUM_REPLICA_GROUPS` for each group (as TorchTitan's torchft runs do).

    --steps N       optimizer steps to commit (default 200), --step-time S seconds a step
                    sleeps beside its compute (default 0.2), --min-replicas M (default 1)

Each rank prints `ft_G rank R: step=N participants=P loss=L` per committed step
(rank R of its group); torchft's Manager logs its quorums and healing at INFO.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from datetime import timedelta

import torch
from torch import nn
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-time", type=float, default=0.2)
    p.add_argument("--min-replicas", type=int, default=1)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    group = int(os.environ.get("REPLICA_GROUP_ID", "0"))
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    inner = torch.optim.SGD(model.parameters(), lr=0.01)

    def load_state_dict(state: dict) -> None:
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=10)),
        min_replica_size=args.min_replicas,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"ft_{group}",
        timeout=timedelta(seconds=10),
    )
    ddp = DistributedDataParallel(manager, model)
    optimizer = Optimizer(manager, inner)
    generator = torch.Generator().manual_seed(group * 1000 + rank)
    while manager.current_step() < args.steps:
        inputs = torch.randn(16, 32, generator=generator)
        targets = inputs.sum(dim=1, keepdim=True)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(ddp(inputs), targets)
        loss.backward()
        before = manager.current_step()
        optimizer.step()  # commits the step when the quorum's replicas agree
        step = manager.current_step()
        if step > before:
            line = (
                f"ft_{group} rank {rank}: step={step} "
                f"participants={manager.num_participants()} loss={loss.item():.4f}"
            )
            os.write(1, (line + "\n").encode())
        time.sleep(args.step_time)
    manager.shutdown()


if __name__ == "__main__":
    main()
