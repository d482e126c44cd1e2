"""Provides a stand-in for torchrun that plays one node of a big job, many nodes on one machine.

Used as JobSpec.launcher (tests/ui/test_big_job.py): ddptui runs
`<launcher> --nnodes=N --nproc_per_node=G ... --tee=3 SCRIPT ARGS`. The node's index comes
from the DDPTUI_TAG (`<run id>.<index>`) every process of a job has. It prints what torchrun's
agent prints that ddptui reads (the rendezvous result: this node's global ranks), then, for
every local rank, `[ddptui:<rank>:<local>]:`-prefixed lines as a training script would:
`Epoch E | Batchsize: 32 | Steps: 8` each epoch, the same on every rank. No worker processes:
128 nodes x 8 ranks are 128 small processes.

    --epochs E          epochs to print (default 3), --epoch-s seconds between them
    --fail NODE/LOCAL   that rank fails in the last epoch: a traceback, then torchrun's
                        `failed (exitcode: 1) local_rank: LOCAL` line, and the node exits 1
    --fail-late S       ... S seconds after its last epoch line (the console stops the nodes
                        still running soon after a failure: with many nodes started over
                        several seconds, those started last would still be running)
    --odd NODE/LOCAL    that rank's epoch line differs by one character (`Steps: 9`)
    --silent NODE/LOCAL that rank prints nothing after the rendezvous
"""

from __future__ import annotations

import argparse
import os
import sys
import time

GLOG = "I1126 12:00:00.000000 {pid} torch/distributed/elastic/agent/server/api.py:553] "


def _flags_and_script_args(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    flags: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            return flags, argv[i + 1 :]
        name, _, value = arg[2:].partition("=")
        flags[name.replace("-", "_")] = value
    return flags, []


def _rank_of(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    node, _, local = text.partition("/")
    return int(node), int(local)


def _say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def main() -> int:
    flags, script_args = _flags_and_script_args(sys.argv[1:])
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--epoch-s", type=float, default=1.0)
    parser.add_argument("--fail")
    parser.add_argument("--fail-late", type=float, default=0.0)
    parser.add_argument("--odd")
    parser.add_argument("--silent")
    args = parser.parse_args(script_args)
    node = int(os.environ.get("DDPTUI_TAG", "x.0").rsplit(".", 1)[1])
    nproc = int(flags.get("nproc_per_node", "1"))
    glog = GLOG.format(pid=os.getpid())
    first = node * nproc
    ranks = list(range(first, first + nproc))
    _say(glog + "[default] Rendezvous complete for workers. Result:")
    for key, value in (
        ("restart_count", "0"),
        ("group_rank", str(node)),
        ("group_world_size", flags.get("nnodes", "1")),
        ("local_ranks", str(list(range(nproc)))),
        ("global_ranks", str(ranks)),
    ):
        _say(f"{glog}  {key}={value}")
    _say(glog)
    fail, odd, silent = _rank_of(args.fail), _rank_of(args.odd), _rank_of(args.silent)
    for epoch in range(args.epochs):
        time.sleep(args.epoch_s)
        for local, rank in enumerate(ranks):
            if (node, local) == silent:
                continue
            steps = 9 if (node, local) == odd else 8
            _say(f"[ddptui:{rank}:{local}]:Epoch {epoch} | Batchsize: 32 | Steps: {steps}")
        if fail is not None and fail[0] == node and epoch == args.epochs - 1:
            rank = first + fail[1]
            time.sleep(args.fail_late)
            for line in ("Traceback (most recent call last):", "RuntimeError: stand-in failure"):
                _say(f"[ddptui:{rank}:{fail[1]}]:{line}")
            pid = os.getpid()
            _say(
                f"E1126 12:00:01.000000 {pid} torch/distributed/elastic/multiprocessing/api.py:"
                f"1002] failed (exitcode: 1) local_rank: {fail[1]} (pid: {pid}) of binary: python3"
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
