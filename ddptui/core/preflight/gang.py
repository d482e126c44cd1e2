"""Provides the gang check: a short all-reduce across the job's processes, judged per node.

The test is trainer/gang_check.py run as a job of its own through the job's backend (the same
nodes, processes per node, environment, activation and container as the job): NCCL on GPUs,
gloo on CPU. Each node reports the busbw of an all-reduce among its own ranks and of one
across the whole job. A node is slow when its own figure is under `SLOW_RATIO` of the other
nodes' median (half; a fifth on gloo), or under `--gang-min-busbw` when given; it is named.
Preflight cannot run a job itself (the session stands beside it), so whoever starts the
preflight passes the runner (ddptui/core/preflight/gang_runner.py).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ddptui.core.job.profiles import bundled_trainer_dir
from ddptui.core.job.spec import JobSpec
from ddptui.core.preflight.model import FAIL, OK, SKIP, WARN, Finding, Observations, skip_dead

GANG_SCRIPT = "gang_check.py"
GANG_TIMEOUT_S = 240.0
# A node under this share of the other nodes' median busbw is slow. CPU collectives (gloo) on
# shared cores vary 2x from run to run (seen on the 2-core test VM under load), so a CPU node
# must be 5x slower to be named; NCCL figures hold within a few per cent.
SLOW_RATIO = {"nccl": 0.5, "gloo": 0.2}
# Checks that must pass before the gang test is worth running.
NEEDED = ("reachable", "python", "torch", "gpu", "rdzv-port", "hostname")
_LINE = re.compile(
    r"ddptui-gang group_rank=(?P<group>\d+) host=(?P<host>\S+) backend=(?P<backend>\S+) "
    r"ranks=(?P<ranks>\d+) world=(?P<world>\d+) bytes=(?P<bytes>\d+) "
    r"node_busbw=(?P<node>[\d.]+|-) all_busbw=(?P<all>[\d.]+)"
)


@dataclass(frozen=True)
class GangNode:
    """One node's line of the gang test."""

    group_rank: int
    host: str
    backend: str
    ranks: int
    world: int
    nbytes: int
    node_busbw: float | None  # GB/s among its own ranks; None with one process per node
    all_busbw: float  # GB/s across the job


@dataclass
class GangRun:
    """What the gang test's run said: each node's line (by the console's node name), and how
    the run ended (`error` empty when every rank exited 0)."""

    nodes: dict[str, GangNode] = field(default_factory=dict)
    error: str = ""
    run_id: str = ""


GangRunner = Callable[[JobSpec], Awaitable[GangRun]]


def parse_line(text: str) -> GangNode | None:
    m = _LINE.search(text)
    if m is None:
        return None
    node = None if m["node"] == "-" else float(m["node"])
    return GangNode(
        int(m["group"]),
        m["host"],
        m["backend"],
        int(m["ranks"]),
        int(m["world"]),
        int(m["bytes"]),
        node,
        float(m["all"]),
    )


def gang_spec(spec: JobSpec, delay: tuple[int, float] | None = None) -> JobSpec:
    """The job, running the gang test instead of its script: same nodes and environment."""
    args: tuple[str, ...] = ()
    if delay is not None:
        args = ("--delay-node", str(delay[0]), "--delay-s", str(delay[1]))
    return spec.model_copy(
        update={
            "profile": "preflight-gang",
            "script": str(bundled_trainer_dir() / GANG_SCRIPT),
            "script_args": args,
            "max_restarts": 0,
            "hang_timeout": 60.0,
            "flight_recorder": False,
            "notify": None,  # a check the operator is watching: no alerts
        }
    )


def check_gang(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "gang")
    live = [n.name for n in obs.live]
    run: GangRun | None = obs.gang
    if run is None:
        return out + [Finding(n, "gang", SKIP, obs.gang_skipped) for n in live]
    if run.error:
        fix = f"see the run's logs (ddptui history; run {run.run_id}) and the checks above"
        missing = [n for n in live if n not in run.nodes]
        return out + [
            Finding(n, "gang", FAIL, f"the all-reduce test failed: {run.error}", fix)
            for n in (missing or live)
        ]
    return out + judge(run.nodes, live, obs.gang_min_busbw)


def judge(nodes: dict[str, GangNode], order: list[str], min_busbw: float = 0.0) -> list[Finding]:
    """Each node's figures; slow nodes named against the others' median or the floor."""
    out = []
    figures = {n: g.node_busbw for n, g in nodes.items() if g.node_busbw is not None}
    for name in order:
        got = nodes.get(name)
        if got is None:
            fix = "its local rank 0 printed no result: see the run's log for that node"
            out.append(Finding(name, "gang", FAIL, "no result from this node", fix))
            continue
        what = f"({got.backend}, {got.nbytes >> 20} MiB all-reduce, busbw)"
        own = got.node_busbw
        words = f"all {got.world} ranks {got.all_busbw:g} GB/s {what}"
        if own is not None:
            words = f"its {got.ranks} ranks {own:g} GB/s; " + words
        else:
            words += "; one process per node: no per-node figure"
        others = [v for n, v in figures.items() if n != name]
        value = own if own is not None else got.all_busbw
        ratio = SLOW_RATIO.get(got.backend, 0.5)
        if own is not None and others and own < ratio * statistics.median(others):
            share = "half" if ratio == 0.5 else f"{ratio:g} of"
            why = f"slow node: {own:g} GB/s among its {got.ranks} ranks, under {share} the "
            why += f"other nodes' median {statistics.median(others):g} GB/s {what}"
            fix = "check this node's GPUs and links (nvidia-smi topo -m, NVLink, PCIe width) "
            fix += "or take it out of the job"
            out.append(Finding(name, "gang", FAIL, why, fix))
        elif min_busbw and value < min_busbw:
            why = f"{value:g} GB/s under the {min_busbw:g} GB/s asked ({words})"
            fix = "check this node's GPUs and network (NCCL_DEBUG=INFO shows the transport)"
            out.append(Finding(name, "gang", WARN if own is None else FAIL, why, fix))
        else:
            out.append(Finding(name, "gang", OK, words))
    return out
