"""Provides the sources of the programs that run on the nodes, sent there on stdin.

Everything in this package runs on a node under the node's own `python3` and uses the
standard library only: the job helper (`job_helper.py`: start, tail, reap, probe, port),
the workers' debug hook (`worker_hook.py`: stacks and flight-recorder dumps) and the
preflight probe (`probe.py`); the task of a Slurm step for every node is a POSIX shell
program (`step_task.sh`). The console never imports them; it reads their text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from ddptui.core.node.step import STEP_PROGRAM_VAR

# The line of each program that the console replaces with the job's description. The
# description travels on stdin, inside the program: on the command line it would be readable
# by every local user (/proc/PID/cmdline), secret values and all.
JOB_LINE = b'JOB = ""  # the console puts the job here (base64 JSON), never on the command line\n'


# How a node runs a program sent on stdin: `python3 -c STDIN_PROGRAM VERB ARGS` reads it
# whole, then compiles it. `python3 - VERB ARGS` would do the same, but CPython's parser
# reads a program from a pipe one character at a time: ~20 ms of CPU for the job helper
# (37 KB), paid by every launch, tail and reap on every node (sys.argv[1:] is the same).
STDIN_PROGRAM = "import sys;exec(compile(sys.stdin.buffer.read(),'<ddptui-node>','exec'))"

# A line of a node program that imports from a file sent ahead of it in the same program.
SENT_AHEAD = b"  # sent ahead of this program\n"
_FUTURE = b"from __future__ import annotations\n"


def _joined(*names: str) -> bytes:
    """Several node programs as one, in order: a later file's imports of the earlier ones
    (lines ending in SENT_AHEAD) and its `from __future__` line (only the first may have
    one) are left out, as their names are already defined above it."""
    parts = []
    for index, name in enumerate(names):
        lines = resources.files(__name__).joinpath(name).read_bytes().splitlines(keepends=True)
        keep = [ln for ln in lines if not ln.endswith(SENT_AHEAD) and (not index or ln != _FUTURE)]
        parts.append(b"".join(keep))
    return b"\n".join(parts)


def job_helper_source() -> bytes:
    """The job helper's program (the GPU sampler, the collectives' follower, the reaper, the
    preemption drill's timing, an agent's end read from its log, one step's tasks and its
    split (step.py), then job_helper.py):
    `python3 - VERB ...` with this on stdin."""
    return _joined(
        "gpu_sampler.py",
        "collective_follow.py",
        "reaper.py",
        "drill.py",
        "netinfo.py",
        "each.py",
        "agent_end.py",
        "step.py",
        "job_helper.py",
    )


def node_probe_source() -> bytes:
    """netinfo.py's `probe` alone, `python3 -S - probe [ADDR PORT]` (the Slurm probe step:
    a tenth of the job helper for every node to compile)."""
    main = b'\nif __name__ == "__main__":\n    import sys\n\n    sys.exit(probe(*sys.argv[2:]))\n'
    return _joined("netinfo.py") + main


def reaper_source() -> bytes:
    """The reaper alone, `python3 -S - reap TAG GRACE ...` (a teardown over SSH or on this
    machine): half the job helper for every node to compile, which is most of what a reap
    costs a node besides its look at every process."""
    main = b'\nif __name__ == "__main__":\n    import sys\n\n    sys.exit(reap(*sys.argv[2:]))\n'
    return _joined("gpu_sampler.py", "reaper.py") + main


def reap_step_source() -> bytes:
    """The reaper alone, `python3 -S - each reap` with a JOB of every node's arguments (the
    Slurm reap step: the helper without what only its launch and probe need)."""
    main = b'if __name__ == "__main__":\n    sys.exit(each(JOB, {"reap": reap}, sys.argv[2]))\n'
    return _joined("gpu_sampler.py", "reaper.py", "each.py") + b"\n" + JOB_LINE + main


# How a node runs the Slurm step's task (step_task.sh, a shell program): from srun's
# environment (STEP_PROGRAM_VAR, taken out of it first, so the command never inherits it),
# else read whole from stdin. srun hands its environment to every node inside the step's
# launch request; stdin it copies to each task over a connection of its own, and 18 KB to 64
# tasks that way cost the step about 0.2 s here. `sh -s` would read stdin too, but bash (the
# `sh` of many clusters) reads a program from a pipe one byte at a time.
STEP_SHELL = (
    f"ddptui_program=${{{STEP_PROGRAM_VAR}-}}; unset {STEP_PROGRAM_VAR}; "
    '[ -n "$ddptui_program" ] || ddptui_program=$(cat); eval "$ddptui_program"'
)


def step_task_script() -> bytes:
    """The task of one Slurm step for every node, a shell program (`sh -c STEP_SHELL`):
    step.py puts every node's entry in front of it."""
    return resources.files(__name__).joinpath("step_task.sh").read_bytes()


def port_check_source() -> bytes:
    """What the head node's task of that step runs to tell who holds the rendezvous port
    (netinfo.py: srun hands the step's program to every node; step.py adds its last lines).
    It runs only when the port would not bind, so it goes as it is: taking its docstrings
    out (ast, 5.3 KB instead of 7.8 KB) cost each launch 10-25 ms between the grant and the
    step's start, and 2.5 KB more in srun's environment costs the step nothing measurable
    (bench/results/slurm_step_parts.md)."""
    return _joined("netinfo.py")


def worker_hook_source() -> bytes:
    """The workers' debug hook (their sitecustomize: the collective sampler, the settings
    report, then worker_hook.py) and its collector, `python3 - collect`."""
    return _joined("collective_sampler.py", "rank_settings.py", "worker_hook.py")


def probe_source() -> bytes:
    """The preflight probe's source (netinfo.py, then probe.py), run the same way as the job
    helper."""
    return _joined("netinfo.py", "probe.py")


def job_text(job: Mapping[str, Any]) -> bytes:
    """The job's description as a program's JOB holds it (base64 JSON)."""
    return base64.b64encode(json.dumps(dict(job)).encode())


def with_job(source: bytes, job: Mapping[str, Any]) -> bytes:
    """`source` with the job's description in place of its JOB line, to send on stdin."""
    if source.count(JOB_LINE) != 1:
        raise ValueError("the node program has no JOB line")
    return source.replace(JOB_LINE, b'JOB = "' + job_text(job) + b'"\n')


# A job helper started before its job is known (the Slurm step's supervisor, on the
# console's host): `python3 -S -c AHEAD_PROGRAM LENGTH VERB ARGS` with the program
# (job_ahead_source) on stdin, then the job (job_text) once known. The program is compiled
# as soon as its LENGTH bytes have come, and its JOB line waits for the rest of stdin.
AHEAD_PROGRAM = (
    "import sys;n=int(sys.argv.pop(1));"
    "exec(compile(sys.stdin.buffer.read(n),'<ddptui-node>','exec'))"
)
_JOB_LATER = b"JOB = sys.stdin.buffer.read().decode()  # the job follows the program on stdin\n"


def job_ahead_source(source: bytes) -> bytes:
    """`source` (a program with a JOB line, after `import sys`) for AHEAD_PROGRAM."""
    if source.count(JOB_LINE) != 1:
        raise ValueError("the node program has no JOB line")
    return source.replace(JOB_LINE, _JOB_LATER)


def ras_query_source() -> bytes:
    """NCCL RAS asked once on a node (`python3 - ras ADDR TIMEOUT`), on a stall only."""
    return resources.files(__name__).joinpath("ras_query.py").read_bytes()
