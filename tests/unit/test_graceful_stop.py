"""Stop signals and grace: the job's fields, what Slurm is asked for and shown in the batch
script, which processes the reaper signals, and the scheduler's word in the summary."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.cli.jobargs import add_job_flags
from ddptui.core.backends.base import reap_args
from ddptui.core.backends.slurm.batch_script import batch_script
from ddptui.core.backends.slurm.commands import salloc_argv
from ddptui.core.diagnose.signatures import scheduler_end
from ddptui.core.job.spec import JobSpec
from ddptui.core.node import STDIN_PROGRAM, reaper_source
from ddptui.core.node.reaper import TAG_VAR, split_workers
from tests.cases import slurm_spec


def test_stop_signals_and_grace_are_fields_flags_and_checked() -> None:
    spec = JobSpec(script="t.py", stop_signals="sigusr1,TERM", grace=60)
    assert spec.stop_signals == ("USR1", "TERM") and spec.grace == 60
    assert reap_args(spec, "run.0")[:2] == ["run.0", "60.0"]
    assert reap_args(spec, "run.0")[-1] == "USR1,TERM"
    # a node the operator kills or drains: its agent too, with SIGTERM, at once
    assert reap_args(spec, "run.0", lost=True)[-2:] == ["TERM", "agents"]
    # a job with restarts, stopped with the default signal: the agents with the workers (an
    # agent with restarts left would restart workers stopped alone); USR1 still goes first
    # to the workers alone, for their handlers
    restarting = JobSpec(script="t.py", max_restarts=3)
    assert reap_args(restarting, "run.0")[-2:] == ["TERM", "agents"]
    assert reap_args(JobSpec(script="t.py"), "run.0")[-1] == "TERM"
    assert reap_args(spec.model_copy(update={"max_restarts": 3}), "run.0")[-1] == "USR1,TERM"
    with pytest.raises(ValueError, match="stop signal KILL"):
        JobSpec(script="t.py", stop_signals=["KILL"])
    with pytest.raises(ValueError, match="B:USR1@120"):
        JobSpec(script="t.py", slurm={"signal": "USR1 at 120"})
    parser = argparse.ArgumentParser()
    add_job_flags(parser)
    flags = ["--stop-signal", "USR1", "--grace", "70", "--slurm-signal", "B:USR1@120"]
    args = parser.parse_args(flags)
    assert (args.stop_signal, args.grace, args.slurm_signal) == (["USR1"], 70.0, "B:USR1@120")


def test_slurm_signal_is_asked_for_and_the_batch_shell_passes_it_on() -> None:
    spec = slurm_spec(slurm={"signal": "B:USR1@120", "mode": "sbatch"})
    assert "--signal=B:USR1@120" in salloc_argv(spec, "r1")
    script = batch_script(spec, "r1", "/runs/r1", 29400)
    assert "#SBATCH --signal=B:USR1@120" in script
    assert 'scancel --signal=USR1 "$SLURM_JOB_ID"\' USR1' in script  # passed to the steps
    assert "trap '' USR1 USR2" in script  # the agents ignore it
    assert "SLURM_RESTART_COUNT" in script  # a requeue appends a new cycle
    plain = batch_script(slurm_spec(slurm={"mode": "sbatch"}), "r1", "/runs/r1", 29400)
    assert "--signal" not in plain and "step_pid" not in plain


AGENT = (
    "import subprocess, sys, time\n"
    "w = subprocess.Popen([sys.executable, '-c', WORKER])\n"
    "print(w.pid, flush=True)\n"
    "w.wait()\n"
    "time.sleep(0.5)  # an agent that ends by itself once its worker has\n"
)
WORKER = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0))\n"
    "time.sleep(60)\n"
)


def test_the_stop_signal_goes_to_the_worker_and_the_agent_ends_by_itself(tmp_path: Path) -> None:
    """An agent named torchrun gets no USR1 (its default would kill it, orphaning the worker);
    the worker does, and the agent, its worker gone, ends on its own: none needed SIGKILL."""
    tag = f"unit-graceful-{os.getpid()}"
    program = tmp_path / "torchrun"  # named as torchrun's agent is
    program.write_text(f"WORKER = {WORKER!r}\n" + AGENT)
    agent = subprocess.Popen(
        [sys.executable, str(program)],
        env={**os.environ, TAG_VAR: tag},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        worker = int(agent.stdout.readline())
        assert split_workers([agent.pid, worker]) == ([worker], [agent.pid])
        begun = time.monotonic()
        cp = subprocess.run(
            [sys.executable, "-S", "-c", STDIN_PROGRAM, "reap", tag, "30", "", "", "", "USR1"],
            input=reaper_source(),
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert time.monotonic() - begun < 20
        assert '"killed": []' in cp.stdout.decode() and '"leftover": []' in cp.stdout.decode()
        assert agent.wait(timeout=5) == 0  # ended by itself, not by a signal
    finally:
        agent.kill()
        agent.wait()


def test_a_time_limit_or_preemption_is_said_with_its_line() -> None:
    lines = [
        "x",
        "slurmstepd: error: *** STEP 7.0 ON node1 CANCELLED AT 2026 DUE TO TIME LIMIT ***",
    ]
    said = scheduler_end({"node1": lines, "node2": ["y"]})
    assert said is not None and said.startswith("the job reached its Slurm time limit")
    assert "(node1: slurmstepd: error: *** STEP 7.0" in said
    assert "preempted" in (
        scheduler_end({"n": ["*** JOB 7 CANCELLED DUE TO PREEMPTION ***"]}) or ""
    )
    assert scheduler_end({"node1": ["all fine"]}) is None
