"""A worker with a graceful stop: on its stop signal it checkpoints for a while, then exits.

Prints `graceful rank=R ready`, then `step=N` once a second. On one of `--stop-on` it writes
OUT/rank<R>.start, keeps printing `checkpointing ...` for `--handler-s` seconds, writes
OUT/rank<R>.ckpt ("<signal> <seconds the handler took>") and exits 0 (`--after continue`:
trains on, as one warned ahead of its time limit does): what a trainer that saves a
checkpoint before preemption does. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def _say(text: str) -> None:
    os.write(1, (text + "\n").encode())  # one write per line: ranks share the pipe


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--handler-s", type=float, default=5.0)
    p.add_argument("--stop-on", default="USR1,TERM")
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--after", choices=["exit", "continue"], default="exit")
    p.add_argument("--cuda", action="store_true", help="hold some memory on the rank's GPU")
    args = p.parse_args()
    rank = os.environ.get("RANK", "0")
    if args.cuda:  # the teardown's GPU proof then has memory to see returned
        import torch

        held = torch.ones(64 << 20, device=f"cuda:{os.environ.get('LOCAL_RANK', '0')}")
        _say(f"graceful rank={rank} holds {held.numel() * 4 >> 20} MiB on {held.device}")

    def handler(number: int, _frame: object) -> None:
        name = signal.Signals(number).name
        begun = time.monotonic()
        with open(os.path.join(args.ckpt_dir, f"rank{rank}.start"), "w") as f:
            f.write(f"{name} {time.time()}\n")
        _say(f"graceful rank={rank} got {name}: checkpointing for {args.handler_s:g} s")
        while time.monotonic() - begun < args.handler_s:
            time.sleep(1.0)
            _say(f"graceful rank={rank} checkpointing ...")
        took = time.monotonic() - begun
        path = os.path.join(args.ckpt_dir, f"rank{rank}.ckpt")
        with open(path + ".tmp", "w") as f:
            f.write(f"{name} {took:.1f}\n")
        os.replace(path + ".tmp", path)
        _say(f"graceful rank={rank} checkpoint written after {took:.1f} s")
        if args.after == "exit":
            os._exit(0)

    for name in args.stop_on.split(","):
        signal.signal(getattr(signal, "SIG" + name), handler)
    os.makedirs(args.ckpt_dir, exist_ok=True)
    _say(f"graceful rank={rank} ready")
    for step in range(args.steps):
        _say(f"graceful rank={rank} step={step}")
        time.sleep(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
