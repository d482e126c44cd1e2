"""Provides the flight-recorder dumps of five broken jobs, made with real torchrun (CPU, gloo).

`python3 make_dumps.py [OUT]` runs each case as `torchrun --nproc_per_node N` on loopback and
leaves one pickle per rank (`OUT/<case>/rank_<r>`, the name torch's analyser reads) and the
process groups that rank knows (`groups_<r>.json`, name -> global ranks: gloo's dumps leave
`pg_config` empty or keyed by ""). A rank
that issues its last collective dumps its recorder at once, then lets the next rank go:
gloo aborts the rank that receives a wrong size, and waits for ever on a skipped collective,
so the dumps must be written before either happens. Every rank then ends on its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = {  # case -> world size
    "skipped": 3,
    "size": 2,
    "op": 2,
    "dtype": 2,
    "deadlock": 2,
}
PORTS = {"skipped": 41511, "size": 41512, "op": 41513, "dtype": 41514, "deadlock": 41515}


def worker(case: str, out: Path) -> None:
    """One rank of a case: a few good collectives, then the broken one."""
    import signal
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # gloo's abort of a peer must not cut a dump
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    groups = [dist.new_group([0, 1]), dist.new_group([0, 1])] if case == "deadlock" else []

    def step(i: int) -> None:
        """The job's step: one call site, whose last call (i == 5) has the case's bug."""
        bad = i == 5 and rank == world - 1
        if case == "skipped" and bad:
            return  # the last rank skips the collective the others enter
        if case == "op" and bad:
            dist.broadcast(torch.ones(4), src=0, async_op=True)
            return
        if case == "deadlock" and i == 5:
            first, _ = groups if rank == 0 else groups[::-1]
            dist.all_reduce(torch.ones(4), group=first, async_op=True)  # never the second
            return
        size = 8 if case == "size" and bad else 4
        dtype = torch.float64 if case == "dtype" and bad else torch.float32
        dist.all_reduce(torch.ones(size, dtype=dtype), async_op=i == 5)

    for i in range(5):
        step(i)
    # in rank order: enter the last collective, dump, let the next rank go
    if rank > 0:
        store.wait([f"dumped{rank - 1}"], timedelta(seconds=30))
    step(5)
    dump = torch._C._distributed_c10d._dump_fr_trace(
        includeCollectives=True, includeStackTraces=True, onlyActive=False
    )
    (out / f"rank_{rank}").write_bytes(dump)
    members = {g.group_name: dist.get_process_group_ranks(g) for g in [dist.group.WORLD, *groups]}
    (out / f"groups_{rank}.json").write_text(json.dumps(members, sort_keys=True) + "\n")
    store.set(f"dumped{rank}", "1")
    if rank == 0:
        store.wait([f"dumped{world - 1}"], timedelta(seconds=30))
    os._exit(0)


def run_case(case: str, out: Path) -> None:
    where = out / case
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "2000", "FR_CASE": case, "FR_OUT": str(where)}
    command = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc_per_node={CASES[case]}", "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{PORTS[case]}", __file__,
    ]  # fmt: skip
    with tempfile.TemporaryFile() as log:
        subprocess.run(command, env=env, stdout=log, stderr=log, timeout=120, check=False)
    missing = [r for r in range(CASES[case]) if not (where / f"rank_{r}").exists()]
    if missing:
        raise SystemExit(f"{case}: no dump from ranks {missing}")


def main() -> None:
    if "FR_CASE" in os.environ:
        worker(os.environ["FR_CASE"], Path(os.environ["FR_OUT"]))
        return
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    for case in sys.argv[2:] or CASES:
        run_case(case, out)
        print(f"{case}: {CASES[case]} dumps in {out / case}")


if __name__ == "__main__":
    main()
