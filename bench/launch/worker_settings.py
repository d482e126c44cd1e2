"""The settings report's cost in a worker: its start to its first step, with it and without.

A worker as torchrun starts it (RANK, LOCAL_RANK, the hook as its sitecustomize, as the job
helper installs it) imports torch, forms a gloo group of one, and takes 20 all-reduce steps;
it prints how long after its interpreter started its first step ended. The same hook with
the settings report left out (its start line replaced) is the alternative; the runs are
interleaved. Also the report's own cost, in the process that writes it: the start report
(files read, no torch import) and the init report (the running torch asked), CPU time.

    python -m bench.launch.worker_settings [--reps 15] [--quick]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common.report import Report, Table, arg_parser, command_line, fmt_ms, ratio
from bench.common.stats import interleaved, median
from ddptui.core.node import rank_settings, worker_hook_source

WORKER = """
import os, socket, time
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
import torch, torch.distributed as dist
dist.init_process_group("gloo", rank=0, world_size=1)
t = torch.ones(1024)
for step in range(20):
    dist.all_reduce(t)
    if step == 0:
        first = time.time()
with open("/proc/self/stat") as f:
    ticks = int(f.read().split(")")[1].split()[19])
with open("/proc/uptime") as f:
    up = float(f.read().split()[0])
began = time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
print(f"first-step {first - began:.4f}")
dist.destroy_process_group()
os._exit(0)
"""
OFF_LINE = b"    start_settings(base, who[0], who[1])"


def hooks(where: Path) -> dict[str, Path]:
    """The hook as the job helper installs it, and the same without the settings report."""
    source = worker_hook_source()
    assert OFF_LINE in source, "the hook no longer starts the report this way"
    out = {}
    for mode, text in (("with", source), ("without", source.replace(OFF_LINE, b"    pass"))):
        (where / mode).mkdir()
        (where / mode / "sitecustomize.py").write_bytes(text)
        out[mode] = where / mode
    return out


def run_worker(hook: Path, debug: Path) -> tuple[float, float]:
    """(its start to its first step, its CPU seconds: user and system, the whole run)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(hook),
        "DDPTUI_DEBUG_DIR": str(debug),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_DEBUG": "WARN",
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=300
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("first-step ")), "")
    if not line:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    return float(line.split()[1]), cpu


def report_cpu(reps: int) -> tuple[float, float]:
    """CPU seconds of one start report and one init report (a gloo group of one here)."""
    environ = dict(os.environ, NCCL_DEBUG="WARN", NCCL_IB_DISABLE="1")
    start = []
    for _ in range(reps):
        t = time.thread_time()
        rank_settings.start_report(environ, "/nonexistent")
        start.append(time.thread_time() - t)
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29733")
    dist.init_process_group("gloo", rank=0, world_size=1)
    group = rank_settings._default_group()
    init = []
    for _ in range(reps):
        t = time.thread_time()
        rank_settings.init_report(group, environ, "/nonexistent")
        init.append(time.thread_time() - t)
    dist.destroy_process_group()
    return median(start), median(init)


def main() -> None:
    parser = arg_parser(__doc__)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    reps = 3 if args.quick else args.reps
    report = Report("worker_settings", "The settings report's cost in a worker", command_line())
    with tempfile.TemporaryDirectory() as tmp:
        made = hooks(Path(tmp))

        def runner(mode: str) -> Callable[[int], tuple[float, float]]:
            return lambda i: run_worker(made[mode], Path(tmp) / f"debug-{mode}-{i}")

        results = interleaved(reps, {mode: runner(mode) for mode in ("with", "without")})
    report.section("Start to the first step, one worker (gloo, a group of one)")
    table = Table(["hook", "first step: median", "min", "max", "CPU: median", "min", "runs"])
    for mode, values in results.items():
        wall, cpu = [v[0] for v in values], [v[1] for v in values]
        table.add(
            mode, fmt_ms(median(wall)), fmt_ms(min(wall)), fmt_ms(max(wall)),
            fmt_ms(median(cpu)), fmt_ms(min(cpu)), reps,
        )  # fmt: skip
    report.table(table)
    walls = {m: median([v[0] for v in vs]) for m, vs in results.items()}
    cpus = {m: median([v[1] for v in vs]) for m, vs in results.items()}
    report.para(
        f"with / without: first step {ratio(walls['with'], walls['without'])}, the worker's "
        f"CPU {ratio(cpus['with'], cpus['without'])} (medians; a shared 2-core machine: the "
        "wall times move with the other work on it, the CPU times much less)"
    )
    report.section("The report's own CPU, in the process that writes it")
    start, init = report_cpu(50 if args.quick else 200)
    report.para(
        f"start report (torch/version.py and the NCCL package read as files, the environment "
        f"filtered): {start * 1e3:.2f} ms CPU; init report (the running torch asked): "
        f"{init * 1e3:.2f} ms CPU. Between them the thread looks for the group five times a "
        f"second (a dictionary lookup), and ends once it has said it."
    )
    if not args.quick:
        report.write()


if __name__ == "__main__":
    main()
