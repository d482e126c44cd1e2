"""Metrics of real runs: headless metric events, the run's metrics file and figures, a NaN
loss of a real diverging training marking its ranks, and two runs on the SSH testbed
compared through the history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from ddptui.core.metrics.metrics_file import read_samples
from testbed.netns import Testbed
from tests.cases import DATA, ROOT, TRAINER
from tests.integration.sshrun import run_headless, state_env

DIVERGING = DATA / "scripts" / "diverging_sgd.py"


def _headless(tmp_path: Path, *args: str, timeout: float = 300) -> tuple[int, list[dict]]:
    proc = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "run", "--headless", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env={**os.environ, "DDPTUI_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)},
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, events


def test_headless_metric_events_file_and_figures_of_elastic_ddp(tmp_path: Path) -> None:
    code, events = _headless(
        tmp_path, "--nodes", "2", "--nproc-per-node", "1", str(TRAINER / "elastic_ddp.py"),
        "--steps", "30",
    )  # fmt: skip
    summary = events[-1]
    assert code == 0, summary
    metrics = [e for e in events if e["event"] == "metric"]
    assert {e["rank"] for e in metrics} == {0, 1}
    assert all(set(e) == {"event", "ts", "rank", "step", "values"} for e in metrics)
    times: dict[int, list[float]] = defaultdict(list)
    for e in metrics:
        times[e["rank"]].append(e["ts"])
    for ts in times.values():  # at most one sample a rank every 50 ms
        assert all(b - a >= 0.05 - 1e-6 for a, b in zip(ts, ts[1:], strict=False)), ts
    last_loss = [e for e in metrics if "loss" in e["values"]][-1]
    assert last_loss["step"] == 30
    rates = [e for e in metrics if "samples/s" in e["values"]]  # each rank's last line
    assert {e["rank"] for e in rates} == {0, 1}
    figures = summary["metrics"]
    assert {"loss.last", "loss.best", "samples/s.last", "samples/s.mean"} <= set(figures)
    # the ranks' rates summed in another order: equal up to the float's last digit
    assert figures["samples/s.mean"] == pytest.approx(sum(e["values"]["samples/s"] for e in rates))
    run_dir = Path(summary["run_dir"])
    samples = list(read_samples(run_dir / "metrics.jsonl"))
    assert [(s.rank, s.step) for s in samples] == [(e["rank"], e["step"]) for e in metrics]
    assert (run_dir / "metrics.jsonl").stat().st_mode & 0o777 == 0o600
    assert '"event": "metric"' not in (run_dir / "events.jsonl").read_text()  # own file


def test_a_nan_loss_of_a_real_training_marks_its_ranks_and_is_the_cause(tmp_path: Path) -> None:
    """lr=1e9: the loss overflows, then is NaN; the script's own guard fails it at the end."""
    code, events = _headless(tmp_path, "--nodes", "1", "--nproc-per-node", "2", str(DIVERGING))
    summary = events[-1]
    assert code == 1
    marked = {}
    for e in events:
        if e["event"] == "rank":
            for d in e["diagnoses"]:
                if d["kind"] == "nan_or_inf":
                    marked.setdefault(e["rank"], d)
    assert set(marked) == {0, 1}
    assert marked[0]["summary"].startswith("loss is ")
    assert "loss=nan" in marked[0]["line"] or "loss=inf" in marked[0]["line"]
    # the first to fail has the cause; the other failed the same way, or its agent
    # stopped it first (a victim of the story)
    (culprit,) = [r for r in summary["ranks"] if r["culprit"]]
    assert culprit["cause"] == "nan_or_inf"
    assert {r["cause"] for r in summary["ranks"]} <= {"nan_or_inf", "stopped_by_launcher"}
    assert summary["metrics"]["loss.last"] == "nan"
    assert summary["metrics"]["loss.best"] < 10  # the first step's, before it diverged


def test_an_ssh_run_compared_with_a_previous_one(testbed: Testbed, tmp_path: Path) -> None:
    state = tmp_path / "state"
    ids = []
    for steps in ("10", "30"):
        run = run_headless(
            testbed, state, "--hosts", "node[1-2]", "--nproc-per-node", "1",
            str(TRAINER / "elastic_ddp.py"), "--steps", steps,
        )  # fmt: skip
        assert run.code == 0, (run.summary, run.stderr)
        assert run.of("metric")
        ids.append(run.summary["run_id"])
    compare = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "history", "--compare", *ids, "--json"],
        capture_output=True, text=True, timeout=60, env=state_env(state), check=True,
    )  # fmt: skip
    rows = {row["figure"]: row for row in map(json.loads, compare.stdout.splitlines())}
    assert rows["loss.last"]["a"] is not None and rows["loss.last"]["b"] is not None
    assert rows["samples/s.mean"]["better"] in ("a", "b")
    table = subprocess.run(
        [sys.executable, "-m", "ddptui.cli", "history", "--compare", *ids],
        capture_output=True, text=True, timeout=60, env=state_env(state), check=True,
    ).stdout.splitlines()  # fmt: skip
    assert table[0].split() == ["METRIC", *ids, "CHANGE"]
    assert any(line.startswith("samples/s.mean") and "*" in line for line in table)
