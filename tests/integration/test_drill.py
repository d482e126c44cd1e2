"""The preemption drill with real torchrun, asked through headless mode's control file
(`drill`, then SIGUSR2): the job's stop signal reaches every rank on every node, each rank's
exit is timed against the grace and kept with the run (the `drill` event, drill.json,
drill.txt), and the teardown's proof follows. A DDP trainer that checkpoints on the signal
(`trainer/cpu_ddp.py --on-signal checkpoint`) exits 0 within the grace; one without a handler
ends by the signal; a handler slower than the grace needs SIGKILL. On this machine, over SSH
(the testbed's hosts) and on Slurm (salloc and sbatch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testbed.netns import Testbed
from testbed.slurm import SlurmCluster
from tests.cases import ROOT
from tests.integration import slurmrun
from tests.integration.elastic_run import act_then_finish
from tests.integration.sshrun import TRAINER, all_running, popen_headless

GRACE_S = 10
DDP = (str(TRAINER / "cpu_ddp.py"), "100000", "100000", "--dataset_size", "65536")
SLOW = ROOT / "tests" / "data" / "graceful" / "worker.py"  # its handler takes --handler-s


def _job(handler: str, tmp_path: Path) -> tuple[str, ...]:
    """The job's script and arguments: the DDP trainer checkpointing on USR1/TERM, or with no
    handler; or a worker whose checkpoint takes twice the grace ("slow")."""
    if handler == "slow":
        out = str(tmp_path / "ckpt")
        return (str(SLOW), "--ckpt-dir", out, "--handler-s", str(2 * GRACE_S), "--stop-on", "USR1")
    path = str(tmp_path / "snapshot.pt")
    return (*DDP, "--checkpoint_path", path, "--on-signal", handler)


def _local(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state")},
    )


def _drill(proc: subprocess.Popen[str], state: Path) -> list[dict[str, Any]]:
    """Once every rank runs, the drill through the control file; every event to the summary."""
    seen = all_running(proc, world=2)
    return act_then_finish(proc, state, seen, "drill")


def _assert_drilled(events: list[dict[str, Any]], handler: str, tmp_path: Path) -> dict:
    """The drill's table as the handler makes it, kept with the run, then the teardown's
    proof; the drill's event."""
    kinds = [e["event"] for e in events]
    assert kinds.count("drill") == 1, kinds
    drill = events[kinds.index("drill")]
    print("\n".join(_table(events)))  # the table, for the record of the run
    rows = drill["ranks"]
    assert sorted(r["rank"] for r in rows) == [0, 1], rows
    assert len({r["node"] for r in rows}) == 2, rows
    assert drill["signals"] == ["USR1"] and drill["grace_s"] == GRACE_S and not drill["problems"]
    for r in rows:
        if handler == "slow":  # still checkpointing at the grace's end
            assert r["killed"] and r["after_s"] is None, r
            assert r["outcome"] == "needed SIGKILL" and r["exit_code"] == -signal.SIGKILL, r
        else:
            assert not r["killed"] and r["outcome"] == "within grace", r
            assert 0 <= r["after_s"] < GRACE_S, r
    codes = {r["exit_code"] for r in rows}
    if handler == "checkpoint":
        assert codes == {0}, rows
        assert (tmp_path / "snapshot.pt").exists()
        said = [e["text"] for e in events if e["event"] == "line"]
        for rank in (0, 1):  # asked by its own SIGUSR1, or by a peer's at the same batch
            assert any(f"[RANK {rank}] " in t and ": snapshot saved" in t for t in said), rank
        assert any(": snapshot saved" in t and "SIGUSR1" in t for t in said), said[-6:]
    elif handler == "none":
        # each rank ends by the signal (no handler: its default ends it), or, where its own
        # came a few ms after its peer's on a loaded machine, of that peer's end (its
        # collective fails: exit 1); the first to end is always the signal's
        first = min(rows, key=lambda r: r["sent_at"] + r["after_s"])
        assert first["exit_code"] == -signal.SIGUSR1, rows
        assert codes <= {-signal.SIGUSR1, 1}, rows
    # the teardown's proof follows the drill, every node clean; the run says it was a drill
    teardown = [i for i, kind in enumerate(kinds) if kind == "teardown"]
    assert len(teardown) == 2 and min(teardown) > kinds.index("drill"), kinds
    assert all(events[i]["clean"] for i in teardown), [events[i] for i in teardown]
    summary = events[-1]
    assert summary["stopped_by"] == "operator", summary
    assert "ended by a drill (" in summary["detail"], summary["detail"]
    assert any(  # the story tells the drill's outcome as the operator's stop
        e["event"] == "incident" and e["summary"] == drill["headline"] for e in events
    ), [e for e in events if e["event"] == "incident"]
    run_dir = Path(summary["run_dir"])
    kept = json.loads((run_dir / "drill.json").read_text())
    assert kept["ranks"] == rows
    assert (run_dir / "drill.txt").read_text().splitlines() == _table(events)
    recorded = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["ranks"] for e in recorded if e["event"] == "drill"] == [rows]
    return drill


def _table(events: list[dict[str, Any]]) -> list[str]:
    """The drill's table as the run directory keeps it (core/session/drill.py writes it)."""
    from ddptui.core.runs.event_log import decode_record
    from ddptui.core.session.drill import DrillReport, drill_table

    data = next(e for e in events if e["event"] == "drill")
    return drill_table(decode_record(DrillReport, data))


@pytest.mark.parametrize("handler", ["checkpoint", "none", "slow"])
def test_local_drill_times_every_rank_against_the_grace(tmp_path: Path, handler: str) -> None:
    proc = _local(
        tmp_path,
        *("--nodes", "2", "--nproc-per-node", "1", "--lines"),
        *("--stop-signal", "USR1", "--grace", str(GRACE_S), *_job(handler, tmp_path)),
    )
    _assert_drilled(_drill(proc, tmp_path / "state"), handler, tmp_path)


@pytest.mark.integration
@pytest.mark.parametrize("handler", ["checkpoint", "none"])
def test_ssh_drill_times_every_rank_on_every_host(
    testbed: Testbed, tmp_path: Path, handler: str
) -> None:
    state = tmp_path / "state"
    proc = popen_headless(
        testbed,
        state,
        *("--hosts", "node1,node2", "--nproc-per-node", "1", "--lines"),
        *("--stop-signal", "USR1", "--grace", str(GRACE_S), *_job(handler, tmp_path)),
    )
    drill = _assert_drilled(_drill(proc, state), handler, tmp_path)
    assert {r["node"] for r in drill["ranks"]} == {"node1", "node2"}


@pytest.mark.integration
@pytest.mark.parametrize(
    ("mode", "handler"),
    [
        ("salloc", "none"),
        ("sbatch", "none"),
        ("srun", "slow"),
        ("srun", "checkpoint"),
        ("sbatch-srun", "checkpoint"),
    ],
)
def test_slurm_drill_times_every_rank_against_the_grace_and_the_warning(
    slurm_cluster: SlurmCluster, tmp_path: Path, mode: str, handler: str
) -> None:
    """Without a handler of its own, a worker ends by USR1 in either mode (its disposition is
    a plain torchrun's); an srun task (`--launch srun`: no torchrun) whose handler outlasts
    the grace gets SIGKILL, each node drilling its own tasks alone (srun direct's one tag is
    every node's). Slurm's warning (`--slurm-signal USR1@5`) is the lead time each rank's
    exit is also held against. srun direct's `srun` carries the job's tag (in a batch job,
    on the first node): it is Slurm's client, not a worker, and the drill leaves it be, so the
    step ends by its tasks' own exits (0, each saving its snapshot), as the table says."""
    how = {
        "srun": ("--launch", "srun"),
        "sbatch-srun": ("--slurm-mode", "sbatch", "--launch", "srun"),
    }.get(mode, ("--slurm-mode", mode))
    proc = slurmrun.start(
        slurm_cluster,
        tmp_path,
        *(*how, "--nproc-per-node", "1", "--lines"),
        *("--slurm-signal", "USR1@5", "--time", "10"),
        *("--stop-signal", "USR1", "--grace", str(GRACE_S), *_job(handler, tmp_path)),
    )
    drill = _assert_drilled(_drill(proc, tmp_path / "state"), handler, tmp_path)
    assert drill["lead_s"] == 5
    assert {r["node"] for r in drill["ranks"]} == set(slurmrun.NODES)
    assert slurmrun.left_on_nodes(slurm_cluster.tb) == {}
