"""Preflight's gang test: a short all-reduce across every process of the job, and one inside
each node, so a slow node can be named.

Launched the way the job is (torchrun on every node, through ddptui), NCCL on GPUs and gloo on
CPU. Each node's ranks all-reduce among themselves (one group per node, all at once: the node's
own GPUs and links), then every rank all-reduces with every other (the job's whole fabric).
busbw is nccl-tests' figure: bytes / time x 2(n-1)/n, in GB/s; the time is the slowest rank's.
Local rank 0 of each node prints one line::

    ddptui-gang group_rank=G host=H backend=B ranks=L world=W bytes=N \
node_busbw=X all_busbw=Y

`node_busbw` is `-` with one process per node (nothing to all-reduce within it).
`--delay-node G --delay-s S` makes node G's ranks sleep S seconds in each of their node
all-reduces: a rehearsal of a slow node for the console's tests.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=_dist.parse_bytes, default=None, help="default 64M GPU, 4M CPU")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120.0, help="process-group timeout (s)")
    p.add_argument("--delay-node", type=int, default=None, metavar="G")
    p.add_argument("--delay-s", type=float, default=0.0, metavar="S")
    return p.parse_args(argv)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(
    t: torch.Tensor, group: object, iters: int, warmup: int, delay: float, slowest: object
) -> float:
    """Mean seconds per all-reduce in `group`, the slowest of its ranks (MAX over `slowest`)."""
    for _ in range(warmup):
        dist.all_reduce(t, group=group)
    _sync(t.device)
    dist.barrier(group=slowest)
    start = time.perf_counter()
    for _ in range(iters):
        if delay:
            time.sleep(delay)
        dist.all_reduce(t, group=group)
    _sync(t.device)
    seconds = torch.tensor([(time.perf_counter() - start) / iters], device=t.device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=slowest)
    return float(seconds.item())


def busbw(nbytes: int, seconds: float, n: int) -> float:
    return nbytes / seconds / 1e9 * 2 * (n - 1) / n if seconds > 0 and n > 1 else 0.0


def main() -> int:
    args = parse_args()
    d = _dist.setup(timeout_s=args.timeout)
    ident = d.ident
    local, world, node = ident.local_world_size, ident.world_size, ident.group_rank
    nbytes = args.bytes or ((64 << 20) if d.device.type == "cuda" else (4 << 20))
    t = torch.ones(nbytes // 4, dtype=torch.float32, device=d.device)
    groups = [
        dist.new_group(list(range(g * local, (g + 1) * local))) for g in range(world // local)
    ]
    mine = groups[ident.rank // local]
    node_bw = "-"
    if local > 1:
        delay = args.delay_s if args.delay_node == node else 0.0
        seconds = timed(t, mine, args.iters, args.warmup, delay, mine)
        node_bw = f"{busbw(nbytes, seconds, local):.3f}"
    seconds = timed(t, None, args.iters, args.warmup, 0.0, None)
    if ident.local_rank == 0:
        _dist.say(
            f"ddptui-gang group_rank={node} host={socket.gethostname()} backend={d.backend} "
            f"ranks={local} world={world} bytes={nbytes} node_busbw={node_bw} "
            f"all_busbw={busbw(nbytes, seconds, world):.3f}"
        )
    return 0


if __name__ == "__main__":
    _dist.run_main(main)
