"""A DDP step loop with quiet checkpoints: the rhythm a console must learn, not call a stall.

Every rank prints ``[RANK R] step N | loss X`` each step (a small model, an all_reduce by DDP,
``--step-s`` seconds a step). Every ``--every`` steps rank 0 prints ``saving checkpoint
ckpt-N.pt`` and then writes for ``--checkpoint-s`` seconds printing nothing (a real save of
the model, then a wait standing in for a slow file system), while the other ranks wait for it
in a barrier, as a real save makes them. ``--hang-at-step S``: at step S rank 0 sleeps in the
step loop and the others wait in its all_reduce, for good (a real hang, no line before it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def sleep_forever() -> None:
    time.sleep(24 * 3600)  # the line the stacks show for the hung rank


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--step-s", type=float, default=1.0, help="seconds a step")
    p.add_argument("--every", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--checkpoint-s", type=float, default=150.0, help="a checkpoint's length")
    p.add_argument("--hang-at-step", type=int, help="rank 0 hangs in the step loop here")
    args = p.parse_args(argv)
    if args.steps < 1 or args.every < 1 or args.step_s < 0 or args.checkpoint_s < 0:
        p.error("--steps and --every must be >= 1, the seconds >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # the barrier waits out the checkpoint: the group's timeout must outlast it. Joined
    # through a store prefix of the rendezvous round (_dist.round_store), so that the
    # workers torchrun restarts find each other, not the last round's addresses.
    _dist.setup(timeout_s=max(1800.0, 4 * args.checkpoint_s), elastic=True)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(32, 16), torch.randn(32, 1)
    for step in range(1, args.steps + 1):
        if step == args.hang_at_step and rank == 0:
            sleep_forever()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
        time.sleep(args.step_s)
        say(f"[RANK {rank}] step {step} | loss {loss.item():.4f}")
        if step % args.every == 0 and step < args.steps:
            if rank == 0:
                say(f"[RANK {rank}] saving checkpoint ckpt-{step}.pt")
                with tempfile.TemporaryDirectory() as folder:
                    torch.save(model.module.state_dict(), os.path.join(folder, "ckpt.pt"))
                    time.sleep(args.checkpoint_s)
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
