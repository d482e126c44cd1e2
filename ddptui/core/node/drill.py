"""Provides the node side of a preemption drill: the stop signals to every worker of the job,
each rank's end timed, SIGKILL for what is left after the grace.

Runs on the nodes as part of the job helper's program, after reaper.py (whose look at the
job's processes it uses), standard library only. The rest of the teardown (the agents, the
proof that nothing is left) is the reaper's, which the console runs next.
"""

from __future__ import annotations

import json
import os
import sys
import time

from ddptui.core.node.reaper import _parent, _signal_all, _signum  # sent ahead of this program

# isort: split
from ddptui.core.node.reaper import _tagged, is_alive, split_workers  # sent ahead of this program

DRILL_POLL_S = 0.01  # how often each rank is looked at: its end is timed to about this
KILLED_GONE_S = 5.0  # how long a SIGKILLed rank gets to be gone
MAX_WAIT_S = 10.0  # the most a node waits for the drill's time (a clock far ahead of ours)
# The variables that name a process's rank: torchrun's worker, else an srun task's.
RANK_VARS = ((b"RANK", b"LOCAL_RANK"), (b"SLURM_PROCID", b"SLURM_LOCALID"))
# Slurm's own clients carry the job's tag (they pass the environment on to the tasks): the
# `srun` of srun direct, on the first node in a batch job. Not the job's workers: a signal
# is theirs to forward, and one killed at the grace's end would end the step and lose every
# task's exit code.
SLURM_CLIENTS = frozenset({"srun", "salloc", "sbatch", "sattach"})


def _env_of(pid: int) -> dict[bytes, bytes]:
    """The process's environment ({} once it is gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(item.partition(b"=")[::2] for item in f.read().split(b"\0") if item)
    except OSError:
        return {}


def _on_this_node(pid: int, node: bytes) -> bool:
    """Whether a process of the job runs on this Slurm node: an srun task says where
    (SLURMD_NODENAME), and where nodes share one process table (test hosts that are network
    namespaces of one machine) the job's tag alone does not, for srun direct's one tag."""
    return _env_of(pid).get(b"SLURMD_NODENAME", node) == node


def _slurm_client(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() in SLURM_CLIENTS
    except OSError:
        return False


def _rank_in_env(pid: int) -> tuple[int, int | None] | None:
    """(rank, local rank) from the process's environment; None for a process of no rank."""
    items = _env_of(pid)
    for rank_var, local_var in RANK_VARS:
        rank = items.get(rank_var, b"")
        if rank.isdigit():
            local = items.get(local_var, b"")
            return int(rank), int(local) if local.isdigit() else None
    return None


def ranks_of(workers: list[int]) -> dict[int, tuple[int, int | None]]:
    """Each rank's own process among the workers: {pid: (rank, local rank)}. A process its
    rank started (a data loader's worker) has the same environment: the one whose parent is
    not of that rank is the rank."""
    found = {pid: who for pid in workers if (who := _rank_in_env(pid)) is not None}
    return {pid: who for pid, who in found.items() if found.get(_parent(pid)) != who}


def ended(pid: int) -> tuple[bool, int | None]:
    """(whether the process has ended, its exit code when it could be read): a zombie's
    /proc/PID/stat holds its wait status (field 52) until its parent reaps it; a process
    already reaped has left none. A code is a subprocess's: -N for signal N."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return True, None
    if fields[0] != "Z":
        return False, None
    if len(fields) < 50 or not fields[49].lstrip("-").isdigit():
        return True, None
    status = int(fields[49])
    return True, -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF


def _watch(pending: dict[int, float], until: float, ends: dict[int, dict]) -> None:
    """Look at each pending rank every DRILL_POLL_S until `until` (monotonic) or none is
    left: each one's end goes into `ends` (seconds after `pending`'s start, exit code)."""
    while pending and time.monotonic() < until:
        now = time.monotonic()
        for pid, since in list(pending.items()):
            over, code = ended(pid)
            if over:
                ends[pid] = {"after": round(now - since, 3), "code": code}
                del pending[pid]
        if pending:
            time.sleep(DRILL_POLL_S)


def drill(tag: str, grace_arg: str, signals: str = "TERM", order: str = "", at: str = "") -> int:
    """At `at` (seconds since the epoch, this node's clock; every node of the job is told the
    same: a rank that stops its peers, as a checkpointing DDP job does, would otherwise end
    them before their own node's drill began; "": now), send the stop signals (`signals`:
    TERM, USR1, ... in order) to every worker of the job on this node (with `order` "agents",
    to the agents too, as the reaper does for a job whose agents would restart their workers),
    time each rank's end against the grace, SIGKILL the workers still there after it. Prints
    one JSON report: {"sent" (this node's clock), "grace", "signals", "ranks": [{"pid", "rank",
    "local_rank", "after", "code", "killed"}], "agents", "others" (the job's processes of no
    rank)}; "after" is None for a rank that did not end."""
    grace = float(grace_arg)
    names = [n for n in signals.split(",") if n] or ["TERM"]
    # The job's processes are looked up first (a look at every process: tens of ms where
    # many run), so that every node sends at `at` itself, not after its own look.
    pids = [p for p in _tagged(tag) if is_alive(p) and not _slurm_client(p)]
    node = os.environ.get("SLURMD_NODENAME", "").encode()
    if node:
        pids = [p for p in pids if _on_this_node(p, node)]
    workers, agents = split_workers(pids)
    ranks = ranks_of(workers)
    if at:  # sleep() counts on the monotonic clock, `at` is the wall clock: until it reads it
        until = min(float(at), time.time() + MAX_WAIT_S)
        while time.time() < until:
            time.sleep(max(until - time.time(), 0.0005))
    sent = time.time()
    start = time.monotonic()
    for name in names:
        _signal_all(pids if order == "agents" else workers, _signum(name))
    ends: dict[int, dict] = {}
    _watch(dict.fromkeys(ranks, start), start + grace, ends)
    left = [p for p in workers if is_alive(p)]
    killed = [p for p in ranks if p not in ends]
    _signal_all(left, 9)
    _watch(dict.fromkeys(killed, start), time.monotonic() + KILLED_GONE_S, ends)
    report = {
        "sent": sent,
        "grace": grace,
        "signals": names,
        "ranks": [
            {
                "pid": pid,
                "rank": rank,
                "local_rank": local,
                "after": None if pid in killed else ends[pid]["after"],
                "code": ends.get(pid, {}).get("code"),
                "killed": pid in killed,
            }
            for pid, (rank, local) in sorted(ranks.items(), key=lambda item: item[1][0])
        ],
        "agents": len(agents),
        "others": len(workers) - len(ranks),
    }
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0
