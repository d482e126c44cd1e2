"""A small fault-tolerant DDP trainer for torchft: one replica group per torchrun.

Each replica group is its own torchrun (its own world); the groups meet through torchft's
Lighthouse (`TORCHFT_LIGHTHOUSE`) and all-reduce gradients across the groups that are in the
current quorum. A group that dies and comes back heals from a live peer (its model and
optimizer state sent over), while the others keep stepping. ddptui sets `REPLICA_GROUP_ID`
and `NUM_REPLICA_GROUPS` for each group (as TorchTitan's torchft runs do).

    --steps N       optimizer steps to commit (default 200), --step-time S seconds a step
                    sleeps beside its compute (default 0.2), --min-replicas M (default 1)
    --slow-group G  a straggler group: group G comes --slow-s S seconds (default 0.5) late
                    to every all-reduce, its peers wait for it there

Each rank prints `ft_G rank R: step=N participants=P loss=L` per committed step
(rank R of its group); torchft's Manager logs its quorums and healing at INFO.

A group whose peer dies while it waits in the gradients' all-reduce keeps its place: torchft
(0.2.0) logs the error and hands it to the Manager (that step is not committed), then its DDP
comm hook asserts on the future the failed wait never set, and the surviving group crashed
and started again. `_DDP` gives DDP the bucket instead.
"""

import argparse
import logging
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo


class _DDP(DistributedDataParallel):
    """torchft's DDP, whose comm hook survives an all-reduce that failed (a peer gone).
    (No `from __future__ import annotations` here: DDP checks the hook's annotations.)"""

    @staticmethod
    def _comm_hook(state: Manager, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        work = state.allreduce(bucket.buffer())
        work.wait()  # a failure is the Manager's now: this step will not commit
        done = work.get_future()
        inner = getattr(done, "_fut", done)  # torchft's managed future wraps DDP's
        if inner is None:  # the failed wait set none: the bucket as it is, never applied
            inner = torch.futures.Future()
            inner.set_result(bucket.buffer())
        return inner


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--step-time", type=float, default=0.2)
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--slow-group", type=int, default=-1)
    p.add_argument("--slow-s", type=float, default=0.5)
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
    ddp = _DDP(manager, model)
    optimizer = Optimizer(manager, inner)
    generator = torch.Generator().manual_seed(group * 1000 + rank)
    while manager.current_step() < args.steps:
        inputs = torch.randn(16, 32, generator=generator)
        targets = inputs.sum(dim=1, keepdim=True)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(ddp(inputs), targets)
        if group == args.slow_group:
            time.sleep(args.slow_s)
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
