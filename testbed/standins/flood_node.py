"""Provides a stand-in for torchrun that floods its stdout with rank-prefixed lines.

Used as JobSpec.launcher by bench/log_flood.py: ddptui runs `<launcher> --nnodes=.. ...
--tee=3 SCRIPT ARGS`, so the torchrun flags (all `--name=value`) are skipped up to the script,
whose arguments set the flood. Each line carries the `[ddptui:<rank>:0]:` prefix torchrun's
`--tee` writes with ddptui's prefix template, a sequence number (to prove no line is lost) and
the wall-clock time its batch was written (to measure how far the console lags). The rank is
the node's index, taken from the DDPTUI_TAG (`<run id>.<index>`) every process of a job has.

    --lines N     lines to write (per node)
    --rate R      lines per second (per node); 0 = as fast as possible

With FLOOD_NODES_APART=1 in its environment (`bench.log_flood --nodes-apart`) it first puts
its scheduling group (its session: itself and the node helper that tails it) at the lowest
priority, standing for a node that is another machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

BATCH_S = 0.01  # at a fixed rate, one write every 10 ms
MAX_BATCH = 2000  # as fast as possible: this many lines per write


def _script_args(argv: list[str]) -> list[str]:
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            return argv[i + 1 :]
    return []


def flood_lines(prefix: str, first: int, count: int) -> bytes:
    stamp = f"{time.time():.3f}"
    return "".join(
        f"{prefix}t={stamp} seq={i} loss=0.{i % 9973:04d} lr=3.0e-04 tok/s=51234.5 step-ok\n"
        for i in range(first, first + count)
    ).encode()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, required=True)
    parser.add_argument("--rate", type=float, default=0.0)
    args = parser.parse_args(_script_args(sys.argv[1:]))
    if os.environ.get("FLOOD_NODES_APART"):
        with open("/proc/self/autogroup", "w") as group:
            group.write("19")
        os.nice(19)
    rank = int(os.environ.get("DDPTUI_TAG", "x.0").rsplit(".", 1)[1])
    prefix = f"[ddptui:{rank}:0]:"
    written, start = 0, time.monotonic()
    while written < args.lines:
        if args.rate > 0:
            due = min(args.lines, int((time.monotonic() - start + BATCH_S) * args.rate))
            count = due - written
            if count <= 0:
                time.sleep(BATCH_S / 2)
                continue
        else:
            count = min(MAX_BATCH, args.lines - written)
        data = flood_lines(prefix, written, count)
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]
        written += count
    os.write(1, f"{prefix}flood done lines={written} t={time.time():.3f}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
