"""The operator's stop signal (`--stop-signal USR1 --grace 10`) with real torchrun, on this
machine and on the Slurm testbed: a worker with no handler of its own ends by the signal
within the grace (its disposition is what a plain torchrun gives it, whatever the node's
step did for the agent), one with a checkpointing handler runs it and exits, and nobody
needs SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.slurm import SlurmCluster
from tests.cases import ROOT
from tests.integration.slurmrun import NODES, assert_clean_teardown, finish, job_of, start
from tests.integration.sshrun import HeadlessRun, all_running
from tests.procs import pids_with_tag

WORKER = ROOT / "tests" / "data" / "graceful" / "worker.py"
GRACE_S = 10


def _worker_args(out: Path, handles_usr1: bool) -> list[str]:
    """The graceful worker: with a USR1 handler that checkpoints for 2 s, or with a handler
    for TERM alone (USR1 then does what its default does: end the process)."""
    stop_on = "USR1" if handles_usr1 else "TERM"
    return [str(WORKER), "--ckpt-dir", str(out), "--handler-s", "2", "--stop-on", stop_on]


def _ends(result: HeadlessRun) -> dict[int, tuple[str, int | None]]:
    """Each rank's last state and exit code, as the run's summary has them."""
    return {r["rank"]: (r["state"], r.get("exit_code")) for r in result.summary["ranks"]}


def _assert_stopped_in_grace(result: HeadlessRun, took: float) -> None:
    assert took < GRACE_S + 30, took  # the grace, the agents' own end, the proof
    for report in result.of("teardown"):
        assert report["clean"], report
        assert "needed SIGKILL" not in report["detail"], report


def _local(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")},
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[HeadlessRun, float]:
    asked = time.monotonic()
    result = finish(proc, signal.SIGTERM)
    return result, time.monotonic() - asked


@pytest.mark.parametrize("handles_usr1", [False, True], ids=["no-handler", "checkpointing"])
def test_local_stop_signal_ends_every_worker_within_the_grace(
    tmp_path: Path, handles_usr1: bool
) -> None:
    out = tmp_path / "ckpt"
    proc = _local(
        tmp_path,
        *("--nodes", "2", "--nproc-per-node", "1", "--stop-signal", "USR1"),
        *("--grace", str(GRACE_S), *_worker_args(out, handles_usr1)),
    )
    all_running(proc, world=2)
    result, took = _stop(proc)

    _assert_stopped_in_grace(result, took)
    ends = _ends(result)
    assert sorted(ends) == [0, 1], ends
    if handles_usr1:
        for rank in (0, 1):
            name, _ = (out / f"rank{rank}.ckpt").read_text().split()
            assert name == "SIGUSR1", rank
    else:
        assert not list(out.glob("*.start")), list(out.iterdir())
        # ended by SIGUSR1, as torchrun reports a worker a signal ended
        assert all(code == -signal.SIGUSR1 for _, code in ends.values()), ends


@pytest.mark.integration
@pytest.mark.parametrize("handles_usr1", [False, True], ids=["no-handler", "checkpointing"])
def test_slurm_stop_signal_ends_every_worker_within_the_grace(
    slurm_cluster: SlurmCluster, tmp_path: Path, handles_usr1: bool
) -> None:
    out = tmp_path / "ckpt"
    proc = start(
        slurm_cluster,
        tmp_path,
        *("--nproc-per-node", "1", "--stop-signal", "USR1", "--grace", str(GRACE_S)),
        *_worker_args(out, handles_usr1),
    )
    seen = all_running(proc, world=2)
    job_id = job_of(seen)
    result, took = _stop(proc)

    _assert_stopped_in_grace(result, took)
    assert_clean_teardown(slurm_cluster, result, job_id)
    assert sorted(r["node"] for r in result.of("teardown")) == NODES
    ends = _ends(result)
    if handles_usr1:
        for rank in (0, 1):
            name, _ = (out / f"rank{rank}.ckpt").read_text().split()
            assert name == "SIGUSR1", rank
    else:
        assert not list(out.glob("*.start")), list(out.iterdir())
        assert all(code == -signal.SIGUSR1 for _, code in ends.values()), (
            ends,
            json.dumps(result.events[-8:])[-3000:],
        )


def _mask(pid: int, field: str) -> int:
    """A signal mask of /proc/PID/status (SigIgn: ignored, SigCgt: caught), as a number."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1], 16)
    raise AssertionError(f"{pid}: no {field}")


def _bit(number: int) -> int:
    return 1 << (number - 1)


@pytest.mark.integration
def test_sbatch_workers_start_with_usr1_and_usr2_at_their_defaults(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The batch script's nodes ignore USR1/USR2 for their agents, as the salloc step does; the
    agents catch them (the workers' hook), so a worker starts with both at their defaults, as
    under a plain torchrun, and one without a USR1 handler ends by the stop signal."""
    out = tmp_path / "ckpt"
    proc = start(
        slurm_cluster,
        tmp_path,
        *("--slurm-mode", "sbatch", "--nproc-per-node", "1"),
        *("--stop-signal", "USR1", "--grace", str(GRACE_S)),
        *_worker_args(out, handles_usr1=False),
    )
    seen = all_running(proc, world=2)
    job_id = job_of(seen)
    run_id = next(e["run_id"] for e in seen if e["event"] == "plan")
    job = pids_with_tag(run_id)
    workers = [p for p in job if b"\0RANK=" in b"\0" + Path(f"/proc/{p}/environ").read_bytes()]
    agents = [p for p in job if b"torchrun" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(workers) == 2 and len(agents) == 2, (workers, agents)
    usr = _bit(signal.SIGUSR1) | _bit(signal.SIGUSR2)
    for pid in workers:  # neither ignored nor caught: at their defaults
        assert _mask(pid, "SigIgn") & usr == 0, pid
        assert _mask(pid, "SigCgt") & usr == 0, pid
    for pid in agents:  # the agent outlives them: caught, and nothing done
        assert _mask(pid, "SigCgt") & usr == usr, pid
    result, took = _stop(proc)

    _assert_stopped_in_grace(result, took)
    assert_clean_teardown(slurm_cluster, result, job_id)
    assert not list(out.glob("*.start")), list(out.iterdir())
    ends = _ends(result)
    assert sorted(ends) == [0, 1], ends
    assert all(code == -signal.SIGUSR1 for _, code in ends.values()), ends
