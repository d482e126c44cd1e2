"""Run history: recorded as runs go, outcomes per rank, and runs whose console died."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddptui.cli.main import main
from ddptui.core.events import AllocationChanged, PlanReady, RankChanged, RankState, RankSummary
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.history import RunHistory, RunRecorder, history_path
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary
from ddptui.core.story.goodput import AttemptGoodput, Goodput, GoodputSplit


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def summary(run_id: str, run_dir: Path, **kw: object) -> RunSummary:
    ranks = tuple(RankSummary(r, f"node{r // 2 + 1}", r % 2, RankState.DONE, 0) for r in range(4))
    fields: dict = {"ok": True, "world_size": 4, "ranks": ranks, "run_dir": str(run_dir)}
    fields.update(run_id=run_id, **kw)
    return RunSummary(**fields)


def test_a_run_is_recorded_running_then_with_its_outcome(state: Path) -> None:
    run = RunDir.create("20250101-000000-aaaaaa")
    spec = make_spec(
        script="t.py", backend="slurm", profile="cpu-ddp-conda", nodes=2, nproc_per_node=2
    )
    recorder = RunRecorder(run, spec)
    recorder.begin()
    (record,) = RunHistory().runs()
    assert (record.id, record.status, record.profile, record.backend) == (
        run.run_id,
        "running",
        "cpu-ddp-conda",
        "slurm",
    )
    assert record.ended is None and record.console_pid == os.getpid()
    recorder.observe(AllocationChanged("granted", "4242", ("node1", "node2")))
    recorder.observe(PlanReady(run.run_id, "10.0.0.1:29400", (("node1", "x"), ("node2", "y"))))
    recorder.observe(summary(run.run_id, run.path))
    (record,) = RunHistory().runs()
    assert record.status == "ok" and record.ended is not None
    assert record.where_text() == "job 4242 (node1,node2)"
    assert record.where_text(short=True) == "job 4242 (node[1-2])"
    assert record.ranks_text() == "4/4 done"
    assert [r.state for r in record.ranks] == ["done"] * 4
    assert history_path() == state / "history.sqlite3"


@pytest.mark.parametrize(
    ("kw", "status"),
    [
        ({"ok": False, "stopped_by": "operator"}, "torn down"),
        ({"ok": False, "stopped_by": "failure"}, "failed"),
        ({"ok": False, "stopped_by": "error"}, "error"),
        ({"ok": False, "detached": True, "stopped_by": "detached"}, "detached"),
    ],
)
def test_outcomes(kw: dict, status: str) -> None:
    run = RunDir.create(f"20250101-000001-{status.replace(' ', '')[:6]:0<6}")
    recorder = RunRecorder(run, make_spec(script="t.py"))
    recorder.begin()
    recorder.observe(summary(run.run_id, run.path, **kw))
    record = RunHistory().get(run.run_id)
    assert record is not None and record.status == status
    assert (record.ended is None) == (status == "detached")


def test_history_names_the_summarys_culprit(state: Path) -> None:
    """Rank 3 crashed, ranks 0-2 were stopped because of it: the row names rank 3."""
    run = RunDir.create("20250101-000009-dddddd")
    recorder = RunRecorder(run, make_spec(script="t.py"))
    recorder.begin()
    ranks = tuple(
        RankSummary(
            r, f"node{r // 2 + 1}", r % 2, RankState.FAILED, 1 if r == 3 else -15, culprit=r == 3
        )
        for r in range(4)
    )
    recorder.observe(summary(run.run_id, run.path, ok=False, ranks=ranks, stopped_by="failure"))
    record = RunHistory().get(run.run_id)
    assert record is not None and record.ranks_text() == "0/4 done, r3 failed (exit 1) +3"


def test_a_run_whose_console_is_gone_is_interrupted(state: Path) -> None:
    run = RunDir.create("20250101-000002-bbbbbb")
    RunRecorder(run, make_spec(script="t.py")).begin()
    run.record(RankChanged(None, "local0", 0, RankState.ASSIGNED))
    run.record(RankChanged(0, "local0", 0, RankState.RUNNING))
    run.record(RankChanged(1, "local0", 1, RankState.FAILED, 3))
    run.close()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    RunHistory().update(run.run_id, console_pid=dead.pid, console_start=None)
    record = RunHistory().get(run.run_id)
    assert record is not None and record.status == "interrupted"
    assert record.ended is None
    assert [(r.rank, r.state) for r in record.ranks] == [(0, "running"), (1, "failed")]
    assert record.ranks_text() == "0/2 done, r1 failed (exit 3)"
    assert "ended without recording an outcome" in record.detail


def test_a_reused_pid_does_not_keep_a_dead_run_running() -> None:
    run = RunDir.create("20250101-000003-cccccc")
    RunRecorder(run, make_spec(script="t.py")).begin()
    assert RunHistory().get(run.run_id).status == "running"  # type: ignore[union-attr]
    RunHistory().update(run.run_id, console_start="1")  # this PID, started at another time
    assert RunHistory().get(run.run_id).status == "interrupted"  # type: ignore[union-attr]


def test_an_unwritable_history_never_stops_a_run(tmp_path: Path) -> None:
    run = RunDir.create("20250101-000004-dddddd")
    blocker = tmp_path / "file"
    blocker.write_text("")
    recorder = RunRecorder(run, make_spec(script="t.py"), RunHistory(blocker / "h.sqlite3"))
    recorder.begin()
    recorder.observe(summary(run.run_id, run.path))
    assert "run history not written" in recorder.problem


def test_history_cli_lists_newest_first(capsys: pytest.CaptureFixture[str]) -> None:
    for i, profile in enumerate(("local", "elastic-ddp")):
        run = RunDir.create(f"20250101-00001{i}-eeeee{i}")
        spec = make_spec(script="t.py", profile=profile, backend="ssh", hosts=("n1", "n2"))
        RunHistory().started(run, spec, started=time.time() - 100 + i)
        RunHistory().finished(summary(run.run_id, run.path, ok=i == 0, stopped_by="failure"))
    assert main(["history"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "RUN",
        "STARTED",
        "TIME",
        "PROFILE",
        "BACKEND",
        "WHERE",
        "OUTCOME",
        "ATTEMPTS",
        "GOODPUT",
        "RANKS",
        "WHAT",
        "HAPPENED",
    ]
    assert "elastic-ddp" in out[1] and "failed" in out[1] and "n1,n2" in out[1]
    assert "local" in out[2] and " ok " in out[2]
    assert main(["history", "--json", "--limit", "1"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    data = json.loads(line)
    assert data["profile"] == "elastic-ddp" and data["status"] == "failed"
    assert data["hosts"] == ["n1", "n2"] and len(data["ranks"]) == 4


def test_history_says_the_teardown_stopped_the_ranks_and_names_the_stalls_suspect(
    state: Path,
) -> None:
    """A stalled run torn down by the operator: no rank failed, rank 1 was the suspect."""
    run = RunDir.create("20250101-000010-eeeeee")
    recorder = RunRecorder(run, make_spec(script="t.py"))
    recorder.begin()
    ranks = tuple(
        RankSummary(r, "local0", r, RankState.STOPPED, None, culprit=r == 1) for r in range(2)
    )
    recorder.observe(summary(run.run_id, run.path, ok=False, ranks=ranks, stopped_by="operator"))
    record = RunHistory().get(run.run_id)
    assert record is not None and record.status == "torn down"
    assert record.ranks_text() == "0/2 done, 2 stopped (r1 the stall's suspect)"


def test_the_verdict_is_kept_and_a_schema_1_database_gains_its_column(state: Path) -> None:
    import sqlite3

    from ddptui.core.diagnose.signatures import Domain, Outlook
    from ddptui.core.diagnose.verdict import Role, Verdict

    state.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(state / "history.sqlite3")  # as schema 1 left it: no verdict column
    old.executescript(
        "CREATE TABLE runs (id TEXT PRIMARY KEY, profile TEXT NOT NULL, backend TEXT NOT NULL,"
        " hosts TEXT NOT NULL DEFAULT '[]', slurm_job TEXT, nodes INTEGER NOT NULL,"
        " nproc_per_node INTEGER NOT NULL, script TEXT NOT NULL, started REAL NOT NULL,"
        " ended REAL, status TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '',"
        " ranks TEXT NOT NULL DEFAULT '[]', run_dir TEXT NOT NULL, console_pid INTEGER,"
        " console_start TEXT, console_host TEXT); PRAGMA user_version = 1;"
    )
    old.close()
    run = RunDir.create("20250101-000000-bbbbbb")
    recorder = RunRecorder(run, make_spec(script="t.py", nodes=1, nproc_per_node=2))
    recorder.begin()
    verdict = Verdict(
        "n0", 1, 1, Role.INITIATING, "collective_mismatch", Domain.JOB, Outlook.FIX_FIRST,
        "rank 1: size mismatch", ("rank 1: size mismatch in all_reduce #6 of group 0",),
    )  # fmt: skip
    recorder.observe(summary(run.run_id, run.path, ok=False, verdict=verdict))
    (record,) = RunHistory().runs()
    assert record.verdict["rank"] == 1 and record.verdict["signature"] == "collective_mismatch"
    assert record.to_dict()["verdict"]["outlook"] == "fix_first"


def test_a_runs_goodput_is_kept_and_shown_as_its_stepping_share(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = RunDir.create("20250101-000020-ffffff")
    RunHistory().started(run, make_spec(script="t.py"), started=1000.0)
    split = GoodputSplit(stepping=62.0, launch=20.0, restart=8.0, teardown=10.0)
    attempts = (
        AttemptGoodput(0, 1000.0, 1050.0, GoodputSplit(stepping=30.0, launch=20.0)),
        AttemptGoodput(1, 1050.0, 1100.0, GoodputSplit(stepping=32.0, restart=8.0, teardown=10.0)),
    )
    goodput = Goodput(1000.0, 1100.0, split, attempts)
    RunHistory().finished(summary(run.run_id, run.path, goodput=goodput), ended=1100.0)
    (record,) = RunHistory().runs()
    assert record.goodput == goodput and record.goodput_text() == "62%"
    assert main(["history", "--wide"]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    assert row[header.index("GOODPUT") :].startswith("62%")
    assert main(["history", "--json"]) == 0
    data = json.loads(capsys.readouterr().out.splitlines()[0])
    assert data["goodput"]["parts"]["restart"] == 8.0 and data["goodput"]["goodput"] == 0.62


def test_history_compare_sets_two_runs_goodput_side_by_side(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    splits = (
        GoodputSplit(stepping=50.0, launch=30.0, teardown=20.0),
        GoodputSplit(stepping=80.0, launch=10.0, restart=5.0, teardown=5.0),
    )
    ids = []
    for i, split in enumerate(splits):
        run = RunDir.create(f"20250101-00003{i}-aaaaaa")
        RunHistory().started(run, make_spec(script="t.py"), started=1000.0)
        goodput = Goodput(1000.0, 1100.0, split)
        RunHistory().finished(summary(run.run_id, run.path, goodput=goodput), ended=1100.0)
        ids.append(run.run_id)
    assert main(["history", "--compare", *ids]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()}
    assert lines["goodput"][2:] == ["50", "80", "*", "+60.0%"]  # `goodput %`: higher is better
    assert lines["launch"][2:] == ["30", "10", "*", "-66.7%"]  # time lost: less is better
    assert lines["restart"][2:5] == ["0", "*", "5"]
    assert lines["stepping"][2:] == ["50", "80", "+60.0%"]  # neither better: more time stepped
    assert main(["history", "--compare", *ids, "--json"]) == 0
    rows = {row["figure"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["goodput %"]["better"] == "b" and rows["wall s"]["a"] == 100.0
