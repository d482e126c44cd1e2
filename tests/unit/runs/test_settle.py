"""Local runs left detached: their outcome read from the run directory, or why it cannot be."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ddptui.core.job.plan import NodeTarget, build_plan
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.history import RunHistory
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.settle import settle_detached
from ddptui.core.runs.summary import RunSummary
from tests.cases import TORCHRUN_CAPTURES

RUN_ID = "20261126-042126-f0093f"
LOGS = {"local0": "errfile_crash_node0.log", "local1": "errfile_crash_node1.log"}


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _detached_run(logs: dict[str, str] = LOGS) -> RunDir:
    """`envcheck.py --fail-rank 1` on 2 local nodes x 2, detached before it ended: its
    node logs as the job helper wrote them (captured), no exit files yet."""
    spec = make_spec(script="envcheck.py", nodes=2, nproc_per_node=2)
    run = RunDir.create(RUN_ID)
    run.write_spec(spec)
    nodes = [NodeTarget(n, "127.0.0.1") for n in logs]
    plan = build_plan(spec, nodes, RUN_ID, 29400)
    run.write_plan(plan, {"backend": "local"})
    for command in plan.commands:
        shutil.copy(
            TORCHRUN_CAPTURES / logs[command.node], run.node_log(command.index, command.node)
        )
    history = RunHistory()
    history.started(run, spec)
    history.finished(RunSummary(False, 4, (), str(run.path), RUN_ID, "detached", detached=True))
    return run


def _exit(run: RunDir, index: int, node: str, code: int) -> None:
    Path(f"{run.node_log(index, node)}.exit").write_text(f"{code}\n")


def _pid(run: RunDir, index: int, node: str, pid: int) -> None:
    Path(f"{run.node_log(index, node)}.pid").write_text(f"{pid} {pid}\n")


def test_a_run_that_ended_gets_the_outcome_a_watching_console_would_have_recorded() -> None:
    run = _detached_run()
    _exit(run, 0, "local0", 1)
    _exit(run, 1, "local1", 1)
    assert RUN_ID in settle_detached()
    record = RunHistory().get(RUN_ID)
    assert record is not None and record.status == "failed" and record.ended is not None
    assert record.detail.startswith("finished while detached: rank 1 on local0 failed first")
    assert record.ranks_text() == "0/4 done, r1 failed (exit 1) +3"
    assert settle_detached() == {}  # settled once: nothing left to do


def test_a_run_whose_job_still_runs_is_left_detached() -> None:
    run = _detached_run()
    _exit(run, 0, "local0", 1)
    _pid(run, 1, "local1", os.getpid())  # its helper is alive
    assert settle_detached() == {}
    record = RunHistory().get(RUN_ID)
    assert record is not None and record.status == "detached"


def test_a_run_whose_helper_vanished_without_an_exit_code_is_unknown() -> None:
    run = _detached_run()
    _exit(run, 0, "local0", 0)
    _pid(run, 1, "local1", 2**22 + 1)  # no such process
    said = settle_detached()
    assert "local1 left no exit code" in said[RUN_ID]
    record = RunHistory().get(RUN_ID)
    assert record is not None and record.status == "unknown"


def test_a_run_of_another_machine_says_where_it_can_be_asked() -> None:
    run = _detached_run()
    RunHistory().update(RUN_ID, console_host="elsewhere.example")
    said = settle_detached()
    assert said == {RUN_ID: "its nodes ran from elsewhere.example: only there can they be asked"}
    record = RunHistory().get(RUN_ID)
    assert record is not None and record.status == "detached"
    assert run.path.is_dir()
