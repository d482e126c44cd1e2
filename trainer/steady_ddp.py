"""A steady, GPU-bound DDP workload for throughput comparisons (e.g. a sampler on vs off).

A stack of ``--layers`` square Linear layers (``--width``) with ReLU between them, a fixed
batch generated once on the device (no data path on the CPU), SGD, DDP over NCCL on GPUs
(bf16 autocast) or gloo on CPU (fp32). ``--warmup`` untimed steps, then ``--windows``
timed windows of ``--steps`` steps each, each closed by a device synchronize. Every rank
prints::

    steady_ddp rank=R window=I samples/s=X
    rank R throughput: X samples/s over N steps

The second line is over all timed windows; its format is elastic_ddp.py's, so the same
readers take it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist  # noqa: E402
import torch  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=8192, help="features of each layer")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=4096, help="samples a step per rank")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--steps", type=int, default=50, help="steps a timed window")
    p.add_argument("--windows", type=int, default=5)
    args = p.parse_args(argv)
    if min(args.width, args.layers, args.batch, args.steps, args.windows) < 1 or args.warmup < 0:
        p.error("sizes and counts must be >= 1 (--warmup >= 0)")
    return args


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> int:
    args = parse_args()
    d = _dist.setup()
    rank, device = d.ident.rank, d.device
    torch.manual_seed(rank)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = DDP(
        torch.nn.Sequential(*layers).to(device),
        device_ids=[device.index] if device.type == "cuda" else None,
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width, device=device)
    use_bf16 = device.type == "cuda"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()

    _dist.say(
        f"steady_ddp rank={rank} backend={d.backend} device={device} width={args.width} "
        f"layers={args.layers} batch={args.batch} bf16={use_bf16}"
    )
    for _ in range(args.warmup):
        step()
    _sync(device)
    total_s = 0.0
    for window in range(args.windows):
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        _sync(device)
        secs = time.perf_counter() - start
        total_s += secs
        rate = args.steps * args.batch / secs
        _dist.say(f"steady_ddp rank={rank} window={window} samples/s={rate:.1f}")
    n = args.steps * args.windows
    _dist.say(f"rank {rank} throughput: {n * args.batch / total_s:.1f} samples/s over {n} steps")
    return 0


if __name__ == "__main__":
    _dist.run_main(main)
