"""All-reduce bandwidth, in the manner of nccl-tests' all_reduce_perf.

float32 tensors from ``--min-bytes`` to ``--max-bytes`` (doubling); each size
is checked once for correctness, warmed up, then timed over ``--iters`` ops.
The time per op is the slowest rank's mean. algbw = bytes / time and
busbw = algbw * 2(n-1)/n, both in GB/s (1e9 bytes). Rank 0 prints::

    allreduce_bench world_size=W backend=B device=D dtype=float32 iters=I warmup=U
    #        size(B)    count(elems)      time(us)   algbw(GB/s)   busbw(GB/s)
         1048576          262144       1234.56        0.8494        0.8494
    # Avg bus bandwidth : 0.8494
    ALLREDUCE_RESULT {"world_size": W, ..., "results": [{"bytes": ..., ...}]}

A wrong sum prints ``allreduce_bench rank=R size=N check=FAIL ...`` and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ELEM_BYTES = 4  # float32
DEFAULT_MAX_CUDA = 1 << 30
DEFAULT_MAX_CPU = 64 << 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--min-bytes",
        type=_dist.parse_bytes,
        default=1 << 20,
        help="smallest message, e.g. 1M (default: 1 MiB)",
    )
    p.add_argument(
        "--max-bytes",
        type=_dist.parse_bytes,
        default=None,
        help="largest message, e.g. 64M (default: 1 GiB on cuda, 64 MiB on cpu)",
    )
    p.add_argument("--iters", type=int, default=20, help="timed ops per size (default: 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed ops per size (default: 5)")
    args = p.parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if args.max_bytes is not None and args.max_bytes < args.min_bytes:
        p.error("--max-bytes must be >= --min-bytes")
    return args


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Message sizes in bytes, doubling, rounded down to whole float32 elements."""
    out: list[int] = []
    size = max(ELEM_BYTES, min_bytes - min_bytes % ELEM_BYTES)
    while size <= max_bytes:
        out.append(size)
        size *= 2
    return out


def bus_factor(world_size: int) -> float:
    """nccl-tests' all-reduce correction: each byte crosses 2(n-1)/n links."""
    return 2.0 * (world_size - 1) / world_size


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(d: _dist.Dist, nbytes: int, iters: int, warmup: int) -> tuple[float, bool]:
    """Seconds per op (slowest rank) and whether the correctness check passed.

    After the check the tensor holds zeros, so repeated sums never overflow.
    """
    world, rank = d.ident.world_size, d.ident.rank
    t = torch.full((nbytes // ELEM_BYTES,), float(rank + 1), dtype=torch.float32, device=d.device)
    dist.all_reduce(t)
    expected = float(world * (world + 1) // 2)
    ok = bool(torch.all(t == expected).item())
    t.zero_()
    for _ in range(warmup):
        dist.all_reduce(t)
    _sync(d.device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    _sync(d.device)
    elapsed = (time.perf_counter() - start) / iters
    stats = torch.tensor([elapsed, 0.0 if ok else 1.0], dtype=torch.float64, device=d.device)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    if not ok:
        _dist.say(f"allreduce_bench rank={rank} size={nbytes} check=FAIL expected={expected}")
    return float(stats[0].item()), ok and float(stats[1].item()) == 0.0


def main() -> int:
    args = parse_args()
    d = _dist.setup()
    world, rank = d.ident.world_size, d.ident.rank
    max_bytes = args.max_bytes
    if max_bytes is None:
        max_bytes = DEFAULT_MAX_CUDA if d.device.type == "cuda" else DEFAULT_MAX_CPU
    max_bytes = max(max_bytes, args.min_bytes)
    factor = bus_factor(world)
    if rank == 0:
        _dist.say(
            f"allreduce_bench world_size={world} backend={d.backend} device={d.device} "
            f"dtype=float32 iters={args.iters} warmup={args.warmup}"
        )
        _dist.say(
            f"#{'size(B)':>15} {'count(elems)':>15} {'time(us)':>13} "
            f"{'algbw(GB/s)':>13} {'busbw(GB/s)':>13}"
        )
    results: list[dict[str, float | int]] = []
    all_ok = True
    for nbytes in sizes(args.min_bytes, max_bytes):
        seconds, ok = measure(d, nbytes, args.iters, args.warmup)
        all_ok = all_ok and ok
        algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
        busbw = algbw * factor
        row = {
            "bytes": nbytes,
            "count": nbytes // ELEM_BYTES,
            "time_us": round(seconds * 1e6, 3),
            "algbw_gbps": round(algbw, 4),
            "busbw_gbps": round(busbw, 4),
            "ok": ok,
        }
        results.append(row)
        if rank == 0:
            _dist.say(
                f" {nbytes:>15} {nbytes // ELEM_BYTES:>15} {seconds * 1e6:>13.2f} "
                f"{algbw:>13.4f} {busbw:>13.4f}"
            )
    if rank == 0:
        avg_busbw = sum(float(r["busbw_gbps"]) for r in results) / len(results)
        _dist.say(f"# Avg bus bandwidth : {avg_busbw:.4f}")
        summary = {
            "world_size": world,
            "backend": d.backend,
            "device": str(d.device),
            "dtype": "float32",
            "iters": args.iters,
            "warmup": args.warmup,
            "ok": all_ok,
            "avg_busbw_gbps": round(avg_busbw, 4),
            "max_busbw_gbps": max(float(r["busbw_gbps"]) for r in results),
            "results": results,
        }
        _dist.say("ALLREDUCE_RESULT " + json.dumps(summary, separators=(",", ":")))
    return 0 if all_ok else 1


if __name__ == "__main__":
    _dist.run_main(main)
