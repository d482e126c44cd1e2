"""History keeps each run's metric figures, migrates older databases in place, compares runs."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from ddptui.cli.main import main
from ddptui.core.events import MetricSampled, RankState, RankSummary
from ddptui.core.job.spec import make_spec
from ddptui.core.runs.compare import compare, past_metric_runs, run_metrics
from ddptui.core.runs.history import RunHistory, RunRecorder, history_path
from ddptui.core.runs.history_schema import SCHEMA_VERSION
from ddptui.core.runs.run_dir import RunDir
from ddptui.core.runs.summary import RunSummary

# The schema as version 1 wrote it (before the metrics column).
_V1 = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY, profile TEXT NOT NULL, backend TEXT NOT NULL,
    hosts TEXT NOT NULL DEFAULT '[]', slurm_job TEXT, nodes INTEGER NOT NULL,
    nproc_per_node INTEGER NOT NULL, script TEXT NOT NULL, started REAL NOT NULL, ended REAL,
    status TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', ranks TEXT NOT NULL DEFAULT '[]',
    run_dir TEXT NOT NULL, console_pid INTEGER, console_start TEXT, console_host TEXT
);
CREATE INDEX runs_started ON runs (started);
PRAGMA user_version = 1;
"""


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DDPTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _finish(run: RunDir, metrics: dict[str, float]) -> None:
    recorder = RunRecorder(run, make_spec(script="t.py", profile="cifar"))
    recorder.begin()
    ranks = (RankSummary(0, "n0", 0, RankState.DONE, 0),)
    recorder.observe(RunSummary(True, 1, ranks, str(run.path), run.run_id, metrics=metrics))


def test_an_older_database_keeps_its_runs_and_gains_the_metrics_column(state: Path) -> None:
    state.mkdir(parents=True)
    db = sqlite3.connect(history_path())
    db.executescript(_V1)
    db.execute(
        "INSERT INTO runs (id, profile, backend, nodes, nproc_per_node, script, started, "
        "status, run_dir) VALUES ('old', 'local', 'local', 1, 2, 'x.py', 1.0, 'ok', '/nowhere')"
    )
    db.commit()
    db.close()
    (old,) = RunHistory().runs()
    assert (old.id, old.status, old.metrics) == ("old", "ok", {})
    db = sqlite3.connect(history_path())
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    columns = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    db.close()
    assert columns.count("metrics") == 1
    run = RunDir.create("20260101-000000-bbbbbb")
    _finish(run, {"loss.last": 0.5, "loss.best": 0.4})
    assert RunHistory().get(run.run_id).metrics == {"loss.last": 0.5, "loss.best": 0.4}  # type: ignore[union-attr]


def test_a_nan_figure_is_kept_as_nan() -> None:
    run = RunDir.create("20260101-000000-cccccc")
    _finish(run, {"loss.last": math.nan, "loss.best": 1.5})
    record = RunHistory().get(run.run_id)
    assert record is not None and math.isnan(record.metrics["loss.last"])
    assert json.dumps(record.to_dict(), allow_nan=False)  # the JSON listing stays JSON


def test_a_run_without_figures_is_read_from_its_metrics_file() -> None:
    run = RunDir.create("20260101-000000-dddddd")
    run.record_metric(MetricSampled(0, 1, {"loss": 2.0, "samples/s": 10.0}, ts=1.0))
    run.record_metric(MetricSampled(0, 2, {"loss": 1.0, "samples/s": 30.0}, ts=2.0))
    run.close()
    assert (run.path / "metrics.jsonl").stat().st_mode & 0o777 == 0o600
    _finish(run, {})
    record = RunHistory().get(run.run_id)
    assert record is not None
    assert run_metrics(record) == {"loss.last": 1.0, "loss.best": 1.0, "samples/s.last": 30.0,
                                   "samples/s.best": 30.0, "samples/s.mean": 20.0}  # fmt: skip


def test_compare_says_which_run_is_better_by_each_metrics_goal() -> None:
    rows = compare(
        {"loss.best": 1.0, "samples/s.mean": 100.0, "lr.last": 0.1},
        {"loss.best": 0.8, "samples/s.mean": 90.0, "test_acc.best": 0.5},
    )
    by = {row.figure: row for row in rows}
    assert by["loss.best"].better == "b" and by["samples/s.mean"].better == "a"
    assert by["lr.last"].better == "" and by["lr.last"].b is None
    assert by["samples/s.mean"].change == pytest.approx(-0.1)
    assert [row.figure for row in rows][-1] == "test_acc.best"


def test_history_compare_prints_both_runs_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = RunDir.create("20260101-000000-aaaaaa"), RunDir.create("20260101-000001-aaaaaa")
    _finish(a, {"loss.last": 1.2, "loss.best": 1.1, "samples/s.mean": 800.0})
    _finish(b, {"loss.last": 0.9, "loss.best": 0.9, "samples/s.mean": 1000.0})
    assert main(["history", "--compare", a.run_id, b.run_id]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["METRIC", a.run_id, b.run_id, "CHANGE"]
    assert out[2].split() == ["loss.best", "1.1", "0.9", "*", "-18.2%"]
    assert out[3].split() == ["samples/s.mean", "800", "1000", "*", "+25.0%"]
    with pytest.raises(SystemExit):
        main(["history", "--compare", a.run_id])
    assert main(["history", "--compare", a.run_id, "nope"]) != 0


def test_the_runs_a_metrics_view_can_lay_over_are_the_profiles_with_metrics() -> None:
    runs = [RunDir.create(f"20260101-00000{i}-eeeeee") for i in range(4)]
    for i, run in enumerate(runs):
        recorder = RunRecorder(run, make_spec(script="t.py", profile="lm" if i < 3 else "other"))
        recorder.history.started(run, recorder.spec, started=1000.0 + i)
        if i != 1:  # run 1 printed no metrics: nothing to lay over
            run.record_metric(MetricSampled(0, 1, {"loss": 1.0}, ts=1.0))
            run.close()
    found = past_metric_runs(RunHistory(), "lm", exclude=runs[2].run_id)
    assert [run_id for run_id, _ in found] == [runs[0].run_id]
    found = past_metric_runs(RunHistory(), "lm", first=runs[3].run_id)
    assert [run_id for run_id, _ in found] == [runs[3].run_id, runs[2].run_id, runs[0].run_id]
    assert found[0][1] == runs[3].path.resolve()


def test_the_console_takes_a_run_to_compare() -> None:
    from ddptui.cli.main import _parser

    assert _parser().parse_args(["--compare", "R1"]).compare_run == "R1"
    args = _parser().parse_args(["history", "--compare", "A", "B"])
    assert args.compare == ["A", "B"]


def test_the_ad_hoc_profile_lays_over_only_runs_of_the_same_script() -> None:
    """`ddptui run SCRIPT` puts every script in one ad-hoc profile: a past run of another
    script is no run to compare with."""
    runs = [RunDir.create(f"20260101-00001{i}-ffffff") for i in range(3)]
    for i, run in enumerate(runs):
        script = "/jobs/lm.py" if i != 1 else "/jobs/vision.py"
        recorder = RunRecorder(run, make_spec(script=script, profile="cli"))
        recorder.history.started(run, recorder.spec, started=2000.0 + i)
        run.record_metric(MetricSampled(0, 1, {"loss": 1.0}, ts=1.0))
        run.close()
    found = past_metric_runs(RunHistory(), "cli", runs[2].run_id, script="/jobs/lm.py")
    assert [run_id for run_id, _ in found] == [runs[0].run_id]
    assert len(past_metric_runs(RunHistory(), "cli", runs[2].run_id)) == 2  # no script: all
