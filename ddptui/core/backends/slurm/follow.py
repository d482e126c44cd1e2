"""Provides what the Slurm backend reads and runs on nodes: srun direct's stream split per
node, the tail of a log for Slurm's complaint, the node shim run on a node by srun, and the
run that used a Slurm job (`ddptui attach JOBID`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ddptui.core.backends.base import reap_clean, reap_detail
from ddptui.core.backends.slurm.cli import SlurmError, last_error, slurm
from ddptui.core.backends.slurm.commands import every_node_argv, helper_argv
from ddptui.core.backends.slurm.log_follow import Ended, follow_log
from ddptui.core.backends.slurm.srun_output import SrunDemux
from ddptui.core.backends.transport import ChunkSink
from ddptui.core.events import TeardownReport
from ddptui.core.job.spec import JobSpec
from ddptui.core.monitor.gpu import judge_gpus
from ddptui.core.node import reap_step_source, with_job
from ddptui.core.runs.run_dir import RunDir, open_private, state_dir

HELPER_TIMEOUT_S = 90.0
CHECK_JOB_WAIT_S = 30  # a check job of its own (no allocation left): how long it may wait
TAIL_BYTES = 8192


async def follow_direct(
    step_log: Path,
    node_log: Path,
    nodes: Sequence[str],
    nproc_per_node: int,
    index: int,
    offset: int,
    on_chunk: ChunkSink,
    ended: Ended,
) -> int:
    """Read srun direct's labelled stream, keep node `index`'s lines, and write them into
    that node's own log too (the record, in the same format as torchrun's).

    `offset` counts this node's bytes, as the Session counts what it was handed.
    """
    demux = SrunDemux(nodes, nproc_per_node)
    skip = offset
    with open_private(node_log, "wb" if offset == 0 else "ab") as log:

        def deliver(part: bytes) -> None:
            nonlocal skip
            if skip:
                part, skip = part[skip:], max(0, skip - len(part))
            if part:
                log.write(part)
                log.flush()
                on_chunk(part)

        code = await follow_log(
            step_log, 0, lambda chunk: deliver(demux.feed(chunk).get(index, b"")), ended
        )
        deliver(demux.flush().get(index, b""))
    return code


def log_tail(path: Path, size: int = TAIL_BYTES) -> list[str]:
    """The last lines of a log ([] if it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - size))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


async def run_job_helper(
    spec: JobSpec, shim: bytes, name: str, node: str, job_id: str | None, verb: str, *args: str
) -> dict[str, Any]:
    """The node shim's `verb` on `node`, through srun: inside the allocation (`--overlap`)
    when `job_id` is given, else as a one-task job of its own. Its JSON report, or SlurmError.
    """
    extra: list[str] = []
    if job_id is None:
        s = spec.slurm
        extra = [f"--immediate={CHECK_JOB_WAIT_S}", "--time=5"]
        extra += [
            f"--{k}={v}" for k, v in (("partition", s.partition), ("account", s.account)) if v
        ]
    argv = helper_argv(job_id, node, name, spec.python, verb, *args, extra=extra)
    result = await slurm(argv, stdin=shim, limit_s=HELPER_TIMEOUT_S + spec.grace, check=False)
    lines = result.stdout.strip().splitlines()
    if result.exit_code != 0 or not lines or not lines[-1].startswith("{"):
        raise SlurmError(last_error(result.stderr) or f"srun exited {result.exit_code}")
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def run_for_job(job_id: str, root: Path | None = None) -> RunDir | None:
    """The run directory of the newest run that used this Slurm job (`ddptui attach JOBID`)."""
    runs = root or state_dir() / "runs"
    for plan in sorted(runs.glob("*/plan.json"), reverse=True):
        with contextlib.suppress(OSError, ValueError):
            backend = json.loads(plan.read_text()).get("backend", {})
            if backend.get("backend") == "slurm" and str(backend.get("job_id")) == job_id:
                return RunDir(plan.parent)
    return None


def reap_report(
    node: str, ended: str, report: dict[str, Any], local: Sequence[int]
) -> TeardownReport:
    """The teardown proof of one node: how its step ended and what the node shim found."""
    leftover = tuple(report["leftover"]) + tuple(local)
    detail = f"{ended}; no process of the job left on {node}"
    if report["found"] and not report["leftover"]:
        detail = f"{ended}; {report['found']} process(es) of the job stopped on {node}, " + (
            f"no process of the job left on {node}"
        )
    elif report["found"]:
        detail = f"{ended}; {report['found']} process(es) of the job were on {node}"
    detail += reap_detail(report)
    if local:
        detail += f"; srun client(s) on this machine left: {', '.join(map(str, local))}"
    gpu = judge_gpus(report["gpu"]) if report.get("gpu") else None
    if gpu is not None:
        detail += f"; {gpu.detail}"
    clean = reap_clean(report) and not local and (gpu is None or gpu.clean)
    return TeardownReport(node, clean, leftover, detail, gpu)


async def probe_all(
    spec: JobSpec, shim: bytes, name: str, nodes: Sequence[str], job_id: str, *args: str
) -> dict[str, dict[str, Any]]:
    """The node shim's `probe` on every node in one srun step (see step_reports)."""
    return await step_reports(spec, shim, name, nodes, job_id, "probe", *args)


async def reap_all(
    spec: JobSpec, name: str, job_id: str, args: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, Any]]:
    """The node shim's `reap` on every node in one srun step, each node with its own
    arguments (`args`: {node: reap_args}, the table the shim's `each` reads)."""
    table = {"nodes": {node: list(a) for node, a in args.items()}}
    source = with_job(reap_step_source(), table)
    return await step_reports(spec, source, name, list(args), job_id, "each", "reap")


async def step_reports(
    spec: JobSpec, shim: bytes, name: str, nodes: Sequence[str], job_id: str, *args: str
) -> dict[str, dict[str, Any]]:
    """The node shim's `args` on every node in one srun step (one task per node, the shim
    on every task's stdin), inside the allocation: {node: report} for the nodes that
    answered (each report names its node, SLURMD_NODENAME). Raises SlurmError when the step
    could not run at all; the caller asks the missing nodes one by one."""
    argv = every_node_argv(job_id, nodes, name, spec.python, *args)
    result = await slurm(argv, stdin=shim, limit_s=HELPER_TIMEOUT_S + spec.grace, check=False)
    reports: dict[str, dict[str, Any]] = {}
    for line in result.stdout.splitlines():
        with contextlib.suppress(ValueError):
            report = json.loads(line)
            if isinstance(report, dict) and report.get("node") in nodes:
                reports[str(report["node"])] = report
    if not reports and result.exit_code != 0:
        raise SlurmError(last_error(result.stderr) or f"srun exited {result.exit_code}")
    return reports
