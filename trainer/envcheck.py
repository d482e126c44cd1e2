"""Cluster readiness check: every rank reports its identity, then all-reduces.

Output (one line each, one ``os.write`` per line)::

    envcheck host=H local_rank=L rank=R group_rank=G local_world_size=LW world_size=W \
backend=B device=D [visible=CUDA_VISIBLE_DEVICES] [gpu=PCI_BUS_ID]
    envcheck rank=R allreduce=ok sum=S          (or allreduce=FAIL ... expected=E, exit 1)
    envcheck rank=R heartbeat=N                 (with --sleep, once a second)

``--fail-rank R`` makes rank R raise (traceback, exit 1) right after joining
the group, or after ``--fail-after`` seconds of heartbeats, for crash tests.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _dist  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sleep",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep running this long after the all-reduce, with a heartbeat line every second",
    )
    p.add_argument(
        "--fail-rank",
        type=int,
        default=None,
        metavar="R",
        help="rank R raises an exception (for crash tests)",
    )
    p.add_argument(
        "--fail-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --fail-rank: fail after the all-reduce and this many seconds "
        "of heartbeats instead of right after init",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="process-group timeout (default 300), so a missing peer fails "
        "instead of hanging for 30 min",
    )
    return p.parse_args(argv)


def _gpu_words(device: object) -> str:
    """` visible=...` when CUDA_VISIBLE_DEVICES is set, ` gpu=<PCI bus id>` on a GPU: which
    physical GPU a rank holds, whatever its `cuda:N` index."""
    words = ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        words += f" visible={visible or '-'}"
    if getattr(device, "type", "") == "cuda":
        import torch

        try:
            props = torch.cuda.get_device_properties(device)
            domain, bus_no, dev = props.pci_domain_id, props.pci_bus_id, props.pci_device_id
            bus = f"{domain:04x}:{bus_no:02x}:{dev:02x}.0"
        except (AttributeError, RuntimeError):
            bus = "?"
        words += f" gpu={bus}"
    return words


def _fail(rank: int) -> None:
    raise RuntimeError(f"envcheck: deliberate failure on rank {rank} (--fail-rank)")


def main() -> int:
    args = parse_args()
    ident = _dist.resolve_identity()
    backend = _dist.choose_backend()
    device = _dist.choose_device(ident, backend)
    # Report before the rendezvous: a rank that cannot join is still seen.
    _dist.say(
        f"envcheck host={socket.gethostname()} local_rank={ident.local_rank} rank={ident.rank} "
        f"group_rank={ident.group_rank} local_world_size={ident.local_world_size} "
        f"world_size={ident.world_size} backend={backend} device={device}{_gpu_words(device)}"
    )
    # through the round's own store prefix: workers torchrun restarts must not read the last
    # round's addresses (a restarted group hangs in init_process_group otherwise)
    d = _dist.setup(timeout_s=args.timeout, ident=ident, elastic=True)
    rank, world = ident.rank, ident.world_size
    failing = args.fail_rank is not None and args.fail_rank == rank
    if failing and args.fail_after is None:
        _fail(rank)

    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank + 1)], device=d.device)
    dist.all_reduce(t)
    total = int(round(t.item()))
    expected = world * (world + 1) // 2
    if total != expected:
        _dist.say(f"envcheck rank={rank} allreduce=FAIL sum={total} expected={expected}")
        return 1
    _dist.say(f"envcheck rank={rank} allreduce=ok sum={total}")

    # Heartbeats until --sleep is over (or, on the failing rank, --fail-after).
    deadline = args.sleep
    if failing:
        deadline = max(deadline, args.fail_after or 0.0)
    start = time.monotonic()
    beat = 0
    while True:
        elapsed = time.monotonic() - start
        if failing and elapsed >= (args.fail_after or 0.0):
            _fail(rank)
        if elapsed >= deadline:
            break
        target = min(float(beat + 1), deadline)
        if failing:
            target = min(target, args.fail_after or 0.0)
        time.sleep(max(0.0, target - elapsed))
        if time.monotonic() - start >= beat + 1:
            beat += 1
            _dist.say(f"envcheck rank={rank} heartbeat={beat}")
    return 0


if __name__ == "__main__":
    _dist.run_main(main)
