"""A run's attempts: torchrun's restart rounds, Slurm's requeues and the operator's relaunches
kept as attempts of one run; history lists the run once, old databases gain the attempts."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest

from ddptui.cli.main import main
from ddptui.cli.reports import print_history
from ddptui.core.events import AllocationChanged, RankState, RankSummary, StopReason
from ddptui.core.job.spec import make_spec
from ddptui.core.monitor.cycles import CycleMember, CycleReport, RestartCycle
from ddptui.core.runs.attempts import (
    Attempt,
    AttemptBook,
    AttemptCause,
    AttemptStarted,
    attempts_of_row,
)
from ddptui.core.runs.history import RunHistory, RunRecorder
from ddptui.core.runs.history_rows import HISTORY_COLUMNS, attempt_lines, history_row
from ddptui.core.runs.history_schema import SCHEMA_VERSION
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary

T0 = 1767225600.0  # 2026-01-01 00:00:00 UTC


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def round_of(index: int, ts: float, cause: str = "start", restarts: int = 0) -> CycleReport:
    """A rendezvous round; `restarts`: torchrun's restart count in it (0: a fresh torchrun)."""
    members = (CycleMember("local0", 0, (0, 1)), CycleMember("local1", 1, (2, 3)))
    cycle = RestartCycle(index, ts, 4, members, cause=cause, restarts=restarts)
    return CycleReport(cycle, ts=ts)


def requeued(count: int, ts: float) -> AllocationChanged:
    detail = f"requeue {count}: the same job runs again, followed as a new cycle"
    return AllocationChanged("requeued", "77", ("sl1", "sl2"), detail, count, ts=ts)


def summary(run: RunDir, ok: bool = True, **kw: object) -> RunSummary:
    state = RankState.DONE if ok else RankState.FAILED
    ranks = tuple(RankSummary(r, f"local{r // 2}", r % 2, state, 0 if ok else 1) for r in range(4))
    return RunSummary(ok, 4, ranks, str(run.path), run.run_id, **kw)  # type: ignore[arg-type]


# -- the book -------------------------------------------------------------------------------------


def test_the_first_round_is_the_launchs_and_a_new_round_is_a_restart() -> None:
    book = AttemptBook.launched("r1", T0)
    assert book.seen(round_of(0, T0 + 1)) == []
    assert book.current.round == 0 and book.current.cause == AttemptCause.LAUNCH
    assert book.seen(round_of(0, T0 + 5)) == []  # the same round told again (its steps)
    (began,) = book.seen(round_of(1, T0 + 9, "rank 1 on local0 failed (exit code 1)", 1))
    assert isinstance(began, AttemptStarted)
    first, second = book.attempts
    assert began.previous == first and began.attempt == second
    assert (first.index, first.ended, first.outcome) == (1, T0 + 9, "restarted")
    assert first.detail == "rank 1 on local0 failed (exit code 1)"
    assert (second.index, second.cause, second.started, second.round) == (
        2,
        AttemptCause.RESTART,
        T0 + 9,
        1,
    )
    assert second.why == "rank 1 on local0 failed (exit code 1)" and second.ended is None


def test_a_requeue_is_one_attempt_whose_first_round_is_not_a_restart() -> None:
    book = AttemptBook.launched("r1", T0)
    book.seen(round_of(0, T0 + 1))
    (began,) = book.seen(requeued(1, T0 + 30))
    assert began.attempt.cause == AttemptCause.REQUEUE and began.attempt.requeue == 1
    assert began.previous is not None and began.previous.outcome == "requeued"
    assert began.attempt.why == "Slurm requeued job 77 (restart 1)"
    assert book.seen(round_of(1, T0 + 40, "membership changed")) == []  # the requeue's round
    assert book.seen(requeued(1, T0 + 50)) == []  # the same requeue told again
    assert [a.cause for a in book.attempts] == [AttemptCause.LAUNCH, AttemptCause.REQUEUE]
    (restart,) = book.seen(round_of(2, T0 + 60, "rank 0 on sl1 failed", restarts=1))
    assert restart.attempt.cause == AttemptCause.RESTART and restart.attempt.requeue == 1
    (again,) = book.seen(requeued(2, T0 + 90))
    assert [a.index for a in book.attempts] == [1, 2, 3, 4] and again.attempt.requeue == 2


def test_a_requeues_first_round_seen_before_the_requeue_is_the_requeues() -> None:
    """The nodes' logs can show the fresh torchrun's round before squeue shows the requeue."""
    book = AttemptBook.launched("r1", T0)
    book.seen(round_of(0, T0 + 1))
    (early,) = book.seen(round_of(1, T0 + 30, "membership changed"))  # restart count 0
    assert early.attempt.cause == AttemptCause.RESTART
    (told,) = book.seen(requeued(1, T0 + 35))
    assert (told.attempt.index, told.attempt.cause, told.attempt.started) == (
        2,
        AttemptCause.REQUEUE,
        T0 + 30,
    )
    assert told.previous is not None and told.previous.outcome == "requeued"
    assert [a.cause for a in book.attempts] == [AttemptCause.LAUNCH, AttemptCause.REQUEUE]
    # a real restart of the workers (torchrun counted it) stays one, the requeue after it new
    (restart,) = book.seen(round_of(2, T0 + 50, "rank 1 failed", restarts=1))
    (again,) = book.seen(requeued(2, T0 + 55))
    assert [a.cause for a in book.attempts][2:] == [AttemptCause.RESTART, AttemptCause.REQUEUE]
    assert restart.attempt.index == 3 and again.attempt.index == 4


def test_a_console_that_attaches_again_replays_no_attempt() -> None:
    """It reads the nodes' logs from their start: rounds and a requeue seen before."""
    book = AttemptBook.launched("r1", T0)
    for event in (round_of(0, T0 + 1), requeued(1, T0 + 30), round_of(1, T0 + 40)):
        book.seen(event)
    again = AttemptBook("r1", list(book.attempts))
    replayed = [round_of(0, T0 + 100), round_of(1, T0 + 101), requeued(1, T0 + 102)]
    assert [e for event in replayed for e in again.seen(event)] == []
    (began,) = again.seen(round_of(2, T0 + 200, "rank 3 on sl2 failed", restarts=1))
    assert began.attempt.index == 3


def test_the_last_attempt_ends_as_the_run_does_and_a_detached_run_goes_on() -> None:
    book = AttemptBook.launched("r1", T0)
    book.finish("detached", "detached: the job runs on", None)
    left = book.current
    assert left.ended is None and left.outcome == ""
    book.finish("failed", "rank 3 failed", T0 + 60)
    ended = book.current
    assert (ended.ended, ended.outcome, ended.detail) == (T0 + 60, "failed", "rank 3 failed")


def test_a_row_without_attempts_has_its_launch_ending_as_the_row() -> None:
    (only,) = attempts_of_row([], "r0", T0, T0 + 42, "ok", "finished\nmore")
    assert (only.index, only.cause, only.started, only.ended) == (1, "launch", T0, T0 + 42)
    assert (only.outcome, only.detail) == ("ok", "finished")
    kept = Attempt(1, AttemptCause.LAUNCH, T0, "r0", T0 + 5, "restarted", "rank 1 failed")
    open_ = Attempt(2, AttemptCause.RESTART, T0 + 5, "r0")
    shown = attempts_of_row([kept, open_], "r0", T0, None, "interrupted", "the console ended")
    assert shown[0] == kept and (shown[1].outcome, shown[1].ended) == ("interrupted", None)


# -- recorded in the history ---------------------------------------------------------------------


def record_run(
    run_id: str, events: list, ok: bool = True, again_of: str | None = None, **kw: object
) -> RunDir:
    run = RunDir.create(run_id)
    if again_of:
        run.mark_attempt_of(again_of)
    recorder = RunRecorder(run, make_spec(script="t.py", nodes=2, nproc_per_node=2))
    recorder.begin()
    for event in events:
        recorder.observe(event)
    recorder.observe(summary(run, ok, **kw))
    return run


def test_a_requeued_run_is_one_row_with_two_attempts() -> None:
    run = record_run(
        "20260101-000000-aaaaaa",
        [round_of(0, T0 + 1), requeued(1, T0 + 30), round_of(1, T0 + 40)],
        ok=False,
        stopped_by=StopReason.OPERATOR,
        detail="torn down by the operator",
    )
    (record,) = RunHistory().listing()
    assert record.id == run.run_id and record.status == "torn down"
    first, second = record.attempts
    assert (first.outcome, first.ended, second.cause) == ("requeued", T0 + 30, "requeue")
    assert second.outcome == "torn down" and second.ended is not None
    assert second.detail == "torn down by the operator"
    row = history_row(record)
    assert row[HISTORY_COLUMNS.index("ATTEMPTS")] == "2"
    lines = attempt_lines(record)
    assert lines[0].startswith("#1 launch  ")
    assert lines[0].endswith("requeued: Slurm requeued job 77 (restart 1)")
    assert lines[1].startswith("#2 requeue  ")  # why: the line before says it
    assert lines[1].endswith("torn down: torn down by the operator")
    data = record.to_dict()
    assert [a["cause"] for a in data["attempts"]] == ["launch", "requeue"]
    json.dumps(data)  # the JSON line of `ddptui history --json`


def test_a_relaunch_is_another_attempt_of_the_same_run_and_two_runs_stay_two() -> None:
    first = record_run("20260101-000000-aaaaaa", [], ok=False, detail="rank 3 failed")
    other = record_run("20260101-000500-bbbbbb", [])
    again = record_run("20260101-001000-cccccc", [round_of(0, T0)], again_of=first.run_id)
    assert again.attempt_of() == first.run_id
    records = RunHistory().listing()
    assert [r.id for r in records] == [first.run_id, other.run_id]  # the newest activity first
    one, two = records
    assert [a.cause for a in one.attempts] == ["launch", "relaunch"]
    assert [a.run_id for a in one.attempts] == [first.run_id, again.run_id]
    assert [a.outcome for a in one.attempts] == ["failed", "ok"]
    assert one.attempts[1].why == f"relaunch of run {first.run_id}"
    # the relaunch's own row counts on from its run's attempts (what its session tells)
    assert [a.index for a in RunHistory().attempts(again.run_id)] == [2]
    assert one.status == "ok" and one.run_dir == str(again.path.resolve())
    assert len(two.attempts) == 1 and two.attempts[0].outcome == "ok"
    assert len(RunHistory().runs()) == 3  # each attempt keeps its row
    lines = attempt_lines(one)
    assert lines[1].startswith(f"#2 relaunch (relaunch of run {first.run_id})  "), lines
    # a relaunch of a run no longer in the history is listed on its own
    lost = record_run("20260101-002000-dddddd", [], again_of="20250101-000000-gone00")
    assert [r.id for r in RunHistory().listing()][0] == lost.run_id


def test_an_old_database_gains_the_attempts_and_keeps_its_rows(state: Path) -> None:
    state.mkdir(parents=True)
    db = sqlite3.connect(state / "history.sqlite3")
    db.executescript(
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, profile TEXT NOT NULL, backend TEXT NOT NULL,
            hosts TEXT NOT NULL DEFAULT '[]', slurm_job TEXT, nodes INTEGER NOT NULL,
            nproc_per_node INTEGER NOT NULL, script TEXT NOT NULL, started REAL NOT NULL,
            ended REAL, status TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '',
            ranks TEXT NOT NULL DEFAULT '[]', run_dir TEXT NOT NULL, console_pid INTEGER,
            console_start TEXT, console_host TEXT, verdict TEXT NOT NULL DEFAULT '',
            metrics TEXT NOT NULL DEFAULT '{}'
        );
        PRAGMA user_version = 3;
        """
    )
    db.execute(
        "INSERT INTO runs (id, profile, backend, nodes, nproc_per_node, script, started, "
        "ended, status, detail, run_dir) VALUES ('old', 'ad-hoc', 'local', 1, 1, 't.py', ?, "
        "?, 'failed', 'rank 0 failed', '/gone')",
        (T0, T0 + 9),
    )
    db.commit()
    db.close()
    (record,) = RunHistory().listing()
    assert record.id == "old" and record.status == "failed"
    (only,) = record.attempts
    assert (only.cause, only.started, only.ended, only.outcome) == ("launch", T0, T0 + 9, "failed")
    db = sqlite3.connect(state / "history.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    assert {"attempts", "attempt_of"} <= columns
    db.close()
    record_run("20260101-000000-aaaaaa", [], again_of="old")  # a relaunch of the old run
    (record,) = RunHistory().listing()
    assert [a.outcome for a in record.attempts] == ["failed", "ok"]


def test_history_prints_each_attempt_and_its_json_has_them() -> None:
    record_run(
        "20260101-000000-aaaaaa",
        [round_of(0, T0 + 1), round_of(1, T0 + 20, "rank 1 on local0 failed (exit code 1)", 1)],
    )
    record_run("20260101-000500-bbbbbb", [])
    out = io.StringIO()
    print_history(None, False, out, width=80)
    lines = out.getvalue().splitlines()
    assert "ATT" in lines[0] and all(len(line) <= 80 for line in lines), lines
    assert "20260101-000000-aaaaaa: 2 attempts" in lines
    at = lines.index("20260101-000000-aaaaaa: 2 attempts")
    assert lines[at + 1].startswith("  #1 launch ") and "restarted" in lines[at + 1]
    assert lines[at + 2].startswith("  #2 restart  ")
    out = io.StringIO()
    print_history(None, True, out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [len(r["attempts"]) for r in rows] == [1, 2]  # newest first
    assert [a["outcome"] for a in rows[1]["attempts"]] == ["restarted", "ok"]


def test_run_again_takes_the_runs_job_and_refuses_a_script(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--again", "no-such-run", "--headless"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
    run = RunDir.create("20260101-000000-aaaaaa")
    assert main(["run", "--again", run.run_id, "x.py"]) == 2
    assert "--again runs the job of run" in capsys.readouterr().err


def test_a_relaunched_runs_id_opens_its_latest_attempt() -> None:
    """`ddptui attach RUN_ID` (and stacks, serve) with the id history shows for the run."""
    from ddptui.cli.main import _open_run

    first = record_run("20260101-000000-aaaaaa", [])
    later = record_run("20260101-001000-bbbbbb", [], again_of=first.run_id)
    for run in (first, later):
        (run.path / "plan.json").write_text("{}")
    assert _open_run(first.run_id).path == later.path.resolve()
    assert _open_run(later.run_id).path == later.path
    alone = record_run("20260101-002000-cccccc", [])
    (alone.path / "plan.json").write_text("{}")
    assert _open_run(alone.run_id).path == alone.path
